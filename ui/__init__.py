"""The Streamlit app's own modules (app.py at the repository root is the page itself).

`explorer` (the NQM explorer's computations), `warmup` (tuning neighbouring settings in the
background), `charts` (altair charts and their export), `measured` (measured sweeps as tables),
`prediction` (the NQM beside a measured curve), `run_form` (a sweep from the app's form),
`reports` (validation reports beside a sweep), `validation_charts` (a validation report's charts),
`places` (where the app's files are). The engines never import from here; of the command lines,
`python -m realnets validate` uses `validation_charts` to export its report's charts.
"""
