"""An NQM fitted to a trained network (docs/validation.md).

Measurements, lowest first: `sharded_sample` (a host sample sharded like the train step),
`hessian_products` (matrix-free Hessian), `lanczos` (top eigenpairs), `slq` (spectral density),
`gradient_stats` (per-example gradient statistics, B_simple, B_noise). Fitting: `power_tail`
(the spectrum beyond the top-k), `nqm_fit` (the NQM and its record, built on `measured` values
with uncertainties), `fitting` (the tail floor and the quadratic's own target). `calibrate` runs
the whole chain.
"""
