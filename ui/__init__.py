"""The Streamlit app's own modules (app.py at the repository root is the page itself).

`explorer` (the NQM explorer's computations), `warmup` (tuning neighbouring settings in the
background), `charts` (altair charts and their export), `gallery` (measured sweeps, reports and
predictions beside them). The engines (`nqm`, `realnets`) never import from here.
"""
