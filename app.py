"""batchscope app: `streamlit run app.py`.

The NQM explorer: how far a bigger batch speeds up training on the exact noisy quadratic model,
with each optimizer's steps-to-target curve, its critical batch size and regimes. All logic lives
in `nqm` (`nqm.explorer` computes, `nqm.charts` draws); this file only reads the controls.
Measured curves and the side-by-side comparison with real networks come with `realnets/`.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from nqm import charts, explorer
from nqm.problem import NOISE_MODELS, NQMConfig

st.set_page_config(page_title="batchscope", layout="wide")


@st.cache_data(show_spinner="Tuning the NQM...")
def cached_exploration(config: NQMConfig, optimizers: tuple, precond_powers: tuple,
                       batch_sizes: tuple):
    return explorer.explore(config, optimizers, precond_powers, batch_sizes)


def apply_preset():
    """Sets the controls of the chosen preset (runs before the widgets are drawn again)."""
    controls, _ = explorer.PRESETS[st.session_state["preset"]]
    for key, value in controls.items():
        st.session_state[key] = value
    st.session_state["shown_preset"] = st.session_state["preset"]


@st.cache_data
def cached_chart_specs(config: NQMConfig, optimizers: tuple, precond_powers: tuple,
                       batch_sizes: tuple):
    """The Vega-Lite specs of the two curve charts, built (and validated) once per setting."""
    result = cached_exploration(config, optimizers, precond_powers, batch_sizes)
    return (charts.steps_chart(result.points, result.lower_bound, result.summary).to_dict(),
            charts.rate_chart(result.points).to_dict())


@st.cache_data
def cached_noise(config: NQMConfig, batch_size: int, lr: float, momentum: float,
                 precond_power: float, steps: int):
    return explorer.noise_scale_along(config, batch_size, lr, momentum, precond_power, steps)


st.title("batchscope: how far does a bigger batch speed up training?")

with st.sidebar:
    st.header("Classic findings")
    preset = st.selectbox("preset", list(explorer.PRESETS), key="preset")
    st.button("show this finding", on_click=apply_preset, key="apply_preset")
    st.header("Problem")
    dim = st.select_slider("dimensions d", options=[100, 300, 1000, 3000, 10000], value=10000,
                           key="dim")
    spectrum = st.slider("spectrum exponent a (h_i = i^-a)", 0.5, 2.0, 1.0, 0.1, key="spectrum")
    noise = st.selectbox("gradient noise c_i", NOISE_MODELS, index=0, key="noise",
                         help="curvature: c = h; power: c_i = i^-b; constant: c_i = 1")
    noise_exp = st.slider("noise exponent b (power noise)", 0.0, 2.0, 1.0, 0.1, key="noise_exp",
                          disabled=noise != "power")
    target = st.number_input("target loss", value=0.01, format="%.4g", key="target")
    st.header("Optimizers")
    optimizers = st.multiselect("tune and compare", list(explorer.OPTIMIZER_LABELS),
                                default=["sgd"], key="optimizers",
                                format_func=lambda k: explorer.OPTIMIZER_LABELS[k],
                                help="momentum and EMA take ~10 s to tune at d = 10000")
    powers = st.multiselect("preconditioning powers p (H^-p)", [0.0, 0.25, 0.5, 0.75, 1.0],
                            default=[0.0], key="powers",
                            help="0: SGD-like; 0.5: Adam-like; 1: K-FAC-like")
    low, high = st.select_slider("batch sizes (powers of two)",
                                 options=[2 ** k for k in range(0, 23)], value=(4, 2 ** 21),
                                 key="batch_range")

batch_sizes = tuple(b for b in (2 ** k for k in range(0, 23)) if low <= b <= high)
config = NQMConfig(dim=dim, spectrum_exponent=spectrum, noise=noise, noise_exponent=noise_exp,
                   target=target)
try:
    result = cached_exploration(config, tuple(optimizers), tuple(float(p) for p in powers),
                                batch_sizes)  # the same key as the chart specs below
except ValueError as err:
    st.session_state["error"] = str(err)
    st.error(f"Cannot compute this setting: {err}")
    st.stop()

st.session_state.pop("error", None)
st.session_state["points"] = result.points
st.session_state["summary"] = result.summary

if "shown_preset" in st.session_state:
    name = st.session_state["shown_preset"]
    st.info(f"**{name}.** {explorer.PRESETS[name][1]}")
st.subheader("Steps to reach the target, tuned at each batch size")
key = (config, tuple(optimizers), tuple(float(p) for p in powers), batch_sizes)
steps_spec, rate_spec = cached_chart_specs(*key)
st.vega_lite_chart(spec=steps_spec, width="stretch")
st.caption("Solid: tuned steps. Dashed: perfect scaling from the smallest batch. Grey: the "
           "estimator bound sum(c/h) / (2 target B), which no method beats. Vertical rules: "
           "B_crit of the fit S = S_min (1 + B_crit / B), cbs20 (last B within 20% of perfect "
           "scaling), and the first B within 10% of the fewest steps (maximal data parallelism).")
st.dataframe(result.summary, hide_index=True)
st.download_button("Download the curves (CSV)", explorer.curves_csv(result.points),
                   file_name="nqm_curves.csv", mime="text/csv", key="download_csv")

left, right = st.columns(2)
with left:
    st.subheader("Tuned learning rate")
    st.vega_lite_chart(spec=rate_spec, width="stretch")
with right:
    st.subheader("Gradient noise scale along a run")
    first = result.points[result.points["optimizer"] == result.points["optimizer"].iloc[0]]
    reached = first[first["steps"].notna()]
    if reached.empty:
        st.info("No batch size reached the target.")
    else:
        choice = st.select_slider("batch size of the run", options=list(reached["batch_size"]),
                                  value=int(reached["batch_size"].iloc[0]), key="noise_batch")
        row = reached[reached["batch_size"] == choice].iloc[0]
        if optimizers[0] in ("sgd", "momentum"):
            momentum = 0.0 if pd.isna(row["momentum"]) else float(row["momentum"])
            traj = cached_noise(config, int(choice), float(row["learning_rate"]), momentum,
                                float(powers[0]), int(row["steps"]))
            st.altair_chart(charts.noise_chart(traj), width="stretch")
            st.caption("B_simple = tr(C) / |G|^2 and B_noise = tr(HC) / G^T H G along the "
                       "expected trajectory of the tuned run: the noise scale grows as the loss "
                       "falls (McCandlish et al. 2018).")
        else:
            st.info("Shown for SGD and momentum runs.")

with st.expander("The model and the equations"):
    st.markdown(
        "Loss `L = 1/2 sum_i h_i theta_i^2`; a stochastic gradient at batch size B is "
        "`H theta + eps`, `eps ~ N(0, C/B)`. SGD moves each direction's second moment as "
        "`E theta^2 <- (1 - a h)^2 E theta^2 + a^2 c / B`; momentum and averaging add a second "
        "state per direction. All curves are exact expectations (no sampling): steps to target "
        "is the first step with E[L] <= target, tuned over the metaparameters at every batch "
        "size (Zhang et al. 2019).")
