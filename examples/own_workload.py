"""An own workload for batchscope: a small 1-D convolutional network (defined here with flax) on
MNIST-1D (Greydanus 2020; the `mnist1d` package generates it offline, so nothing is downloaded).

    python -m realnets sweep --workload examples/own_workload.py:make_workload \
        --batch-sizes 16:1024 --trials 16 --goal auto --out runs/own

Everything batchscope needs is in `make_workload()`: see docs/own_workload.md.
"""

import flax.linen as nn
import jax.numpy as jnp
import numpy as np
import optax
from mnist1d.data import get_dataset_args, make_dataset

from realnets.workloads.own import own_workload
from realnets.workloads.search_space import TrialSearchSpace


class SignalCNN(nn.Module):
    """Input float32 (B, 40) signals; output (B, 10) logits. Three convolutions of width 5 with
    `channels` channels and ReLU, then a dense layer (the shape of Greydanus's ConvBase)."""

    channels: int = 16

    @nn.compact
    def __call__(self, x):
        x = x[..., None]                                 # (B, 40, 1): length, channels
        for stride in (2, 2, 2):
            x = nn.relu(nn.Conv(self.channels, (5,), strides=(stride,))(x))
        return nn.Dense(10)(x.reshape(x.shape[0], -1))


def make_workload():
    args = get_dataset_args()
    args.num_samples = 5000                              # 4,000 train / 1,000 validation
    data = make_dataset(args)                            # generated here, deterministic
    x, y = data["x"].astype(np.float32), data["y"].astype(np.int32)
    xv, yv = data["x_test"].astype(np.float32), data["y_test"].astype(np.int32)
    model = SignalCNN()

    def init_params(key):
        return model.init(key, x[:1])

    def loss(params, batch):                             # (B,) per-example cross-entropy
        logits = model.apply(params, batch["x"])
        return optax.softmax_cross_entropy_with_integer_labels(logits, batch["y"])

    def error(params, batch):                            # (B,) 1.0 where wrong
        logits = model.apply(params, batch["x"])
        return (jnp.argmax(logits, axis=-1) != batch["y"]).astype(jnp.float32)

    return own_workload(
        "mnist1d_cnn", init_params=init_params, loss=loss, metric=error, metric_name="error",
        train={"x": x, "y": y}, val={"x": xv, "y": yv}, optimizer="momentum",
        search=TrialSearchSpace((1e-3, 3.0), (1e-2, 1.0)),
        batch_sizes=(16, 32, 64, 128, 256, 512, 1024), max_steps=2000,
        data="MNIST-1D, 5,000 samples generated offline (4,000 train / 1,000 validation)",
        model="1-D CNN: 3 x conv5 (16 channels, stride 2), dense 10 (flax)")
