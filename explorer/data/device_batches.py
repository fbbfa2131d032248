"""The fast path's data: the training images held on the device as uint8, each step's batch gathered, cropped,
flipped and mixed inside the compiled step.

The host still draws every augmentation (explorer.data.augment's draws, from the batch's own (seed, epoch, step)
generator, exactly as the numpy batches draw them) but sends only those few numbers per image and the mixed
labels; the pixels never leave the device. So a step costs the host a few hundred random numbers instead of
cropping, mixing and copying 1.5 MB of float images, a resumed run draws what the uninterrupted one drew, and
the batches equal the numpy path's (to float rounding in mixup's blend).

On JAX several steps run per call into the compiled function (`steps_per_call`): one item of the dataset holds
that many steps' draws, and the fitted model's train step scans over them. When an epoch's steps do not divide
by `steps_per_call`, its last item is topped up with steps whose labels are all zero, which the scan skips
(their state is dropped), as long as that wastes at most an eighth of the epoch's steps (the paper recipe's
1,055 steps at 16 a call waste one): every call then has one shape and the step compiles once, not twice (on
an H200 a scan of the paper preset's step compiles in about 50 s). An epoch shorter than one call is one call.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from explorer.data.augment import draw_crop_flip, draw_mix, mix_labels
from explorer.data.batches import BatchPlan

PAD = 4


@keras.saving.register_keras_serializable(package="explorer")
class DeviceImages(keras.layers.Layer):
    """A table of uint8 images on the device that turns one step's draws into its float batch.

    The table is data, not state: it is neither saved nor restored with the weights (a backup of the fitted
    model holds the model, its optimizer and its random states only). `assign` fills it once per run.

    Args:
        count: rows of the table (training images, then validation images).
        height, width, channels: the images' shape.
        pad: the crop's reflect padding, in pixels (a draw's dy = dx = pad is the image itself).

    Call arguments:
        draws: a dict of (batch,) int32 `index` (the table's rows), `dy`, `dx` (the crop's corner in the
            padded image), `flip` (1: flipped left-right), `partner` (row in the batch it is mixed with),
            float32 `lam` and `rest` (the image's and its partner's weight outside the box), and a (batch, 4)
            int32 `box` (y0, y1, x0, x1: where the partner is pasted; empty when not CutMix).

    Returns:
        (batch, height, width, channels) float32 images on the 0-255 scale.
    """

    def __init__(self, count, height, width, channels=3, pad=PAD, **kwargs):
        super().__init__(**kwargs)
        self.count, self.height, self.width, self.channels, self.pad = count, height, width, channels, pad
        self.images = self.add_weight(name="images", shape=(count, height, width, channels), dtype="uint8",
                                      initializer="zeros", trainable=False, autocast=False)

    def assign(self, images: np.ndarray) -> None:
        self.images.assign(np.ascontiguousarray(images, dtype="uint8"))

    def _reflect(self, index, size):
        index = ops.abs(index)
        return ops.where(index > size - 1, 2 * (size - 1) - index, index)

    def call(self, draws):
        h, w = self.height, self.width
        rows = self._reflect(draws["dy"][:, None] + ops.arange(h, dtype="int32")[None] - self.pad, h)
        columns = ops.arange(w, dtype="int32")[None]
        columns = ops.where(draws["flip"][:, None] > 0, w - 1 - columns, columns)
        columns = self._reflect(draws["dx"][:, None] + columns - self.pad, w)
        flat = (draws["index"][:, None, None] * h + rows[:, :, None]) * w + columns[:, None, :]
        table = ops.reshape(self.images, (-1, self.channels))
        batch = ops.cast(ops.take(table, flat, axis=0), "float32")
        other = ops.take(batch, draws["partner"], axis=0)
        box = draws["box"]
        y = ops.arange(h, dtype="int32")[None, :, None]
        x = ops.arange(w, dtype="int32")[None, None, :]
        inside = ((y >= box[:, 0, None, None]) & (y < box[:, 1, None, None])
                  & (x >= box[:, 2, None, None]) & (x < box[:, 3, None, None]))[..., None]
        own = ops.where(inside, 0.0, draws["lam"][:, None, None, None])
        theirs = ops.where(inside, 1.0, draws["rest"][:, None, None, None])
        return own * batch + theirs * other

    def compute_output_spec(self, draws):
        batch = draws["index"].shape[0]
        return keras.KerasTensor((batch, self.height, self.width, self.channels), dtype="float32")

    def save_own_variables(self, store):
        pass  # the images are the run's data, put in by `assign`

    def load_own_variables(self, store):
        pass

    def get_config(self):
        config = super().get_config()
        config.update(count=self.count, height=self.height, width=self.width, channels=self.channels,
                      pad=self.pad)
        return config


def draw_inputs() -> dict:
    """The symbolic inputs of one step's draws (see DeviceImages)."""
    inputs = {name: keras.Input((), dtype="int32", name=name)
              for name in ("index", "dy", "dx", "flip", "partner")}
    inputs.update(lam=keras.Input((), dtype="float32", name="lam"),
                  rest=keras.Input((), dtype="float32", name="rest"),
                  box=keras.Input((4,), dtype="int32", name="box"))
    return inputs


def identity_draws(index: np.ndarray, pad: int = PAD) -> dict:
    """The draws that give the images themselves: no crop, flip or mix."""
    n = len(index)
    return {"index": index.astype("int32"), "dy": np.full(n, pad, "int32"), "dx": np.full(n, pad, "int32"),
            "flip": np.zeros(n, "int32"), "partner": np.arange(n, dtype="int32"),
            "lam": np.ones(n, "float32"), "rest": np.zeros(n, "float32"), "box": np.zeros((n, 4), "int32")}


def step_draws(index: np.ndarray, rng: np.random.Generator, size: tuple[int, int], augment: bool,
               mixup_alpha: float, cutmix_alpha: float, mix_prob: float) -> tuple[dict, object]:
    """(one step's draws, its Mix or None), drawn in the order the numpy batches draw them."""
    draws = identity_draws(index)
    n = len(index)
    if augment:
        crop = draw_crop_flip(rng, n, PAD)
        draws.update(dy=crop.dy.astype("int32"), dx=crop.dx.astype("int32"), flip=crop.flips.astype("int32"))
    mix = draw_mix(rng, n, size, mixup_alpha, cutmix_alpha, mix_prob)
    if mix is not None:
        draws["partner"] = mix.partner.astype("int32")
        if mix.method == "mixup":
            draws["lam"] = np.full(n, mix.lam, "float32")
            draws["rest"] = np.full(n, 1.0 - mix.lam, "float32")
        else:
            draws["box"] = np.tile(np.asarray(mix.box, "int32"), (n, 1))
    return draws, mix


def make_device_batches(y, num_classes: int, batch_size: int, image_size: tuple[int, int], augment: bool,
                        seed: int, mixup_alpha: float = 0.0, cutmix_alpha: float = 0.0, mix_prob: float = 1.0,
                        repeats: int = 1, steps_per_call: int = 1):
    """A keras PyDataset of (draws, soft labels) for a DeviceImages table whose first rows are the training
    images `y` labels: the same steps as batches.make_batches(..., shuffle=True), `steps_per_call` of them
    per item (their draws concatenated; an epoch's last item may hold fewer)."""
    plan = BatchPlan(len(y), batch_size, seed, True, repeats)
    eye = np.eye(num_classes, dtype="float32")
    steps_per_call = min(steps_per_call, len(plan))
    short = len(plan) % steps_per_call
    top_up = bool(short) and (steps_per_call - short) * 8 <= len(plan)

    class DeviceBatches(keras.utils.PyDataset):
        steps = len(plan)  # optimizer steps per epoch

        def begin(self, epochs_done: int = 0) -> None:
            plan.begin(epochs_done)

        def __len__(self):
            return -(-len(plan) // steps_per_call)

        def steps_in(self, item: int) -> int:
            return min(steps_per_call, len(plan) - item * steps_per_call)

        def __getitem__(self, item):
            steps = []
            for i in range(item * steps_per_call, item * steps_per_call + self.steps_in(item)):
                index, _, rng = plan.take(i)
                draws, mix = step_draws(index, rng, image_size, augment, mixup_alpha, cutmix_alpha, mix_prob)
                steps.append((draws, mix_labels(eye[y[index]], mix)))
            if top_up:  # the epoch's last item: topped up with steps the scan skips (labels all 0)
                steps += [(steps[-1][0], np.zeros_like(steps[-1][1]))] * (steps_per_call - len(steps))
            draws = {k: np.concatenate([d[k] for d, _ in steps]) for k in steps[0][0]}
            return draws, np.concatenate([labels for _, labels in steps])

    return DeviceBatches()


def make_validation_batches(offset: int, y, num_classes: int, batch_size: int):
    """Unaugmented batches of the table's rows offset.. (the validation images, labels `y`), padded as
    batches.make_batches pads them: repeats weigh 0, so the weighted metrics count each real image once."""
    plan = BatchPlan(len(y), batch_size, 0, False)
    eye = np.eye(num_classes, dtype="float32")

    class ValidationBatches(keras.utils.PyDataset):
        def __len__(self):
            return len(plan)

        def __getitem__(self, i):
            index, real, _ = plan.take(i)
            weights = (np.arange(batch_size) < real) * np.float32(len(self) * batch_size / len(y))
            return identity_draws(index + offset), eye[y[index]], weights.astype("float32")

    return ValidationBatches()


def multi_step_model(inputs, outputs, batch_size: int, name: str) -> keras.Model:
    """A functional model whose train step (on JAX) runs every step of an item in one compiled call: a
    `lax.scan` of Keras' own step over the item's batches of `batch_size`. Elsewhere it is a plain model."""
    if keras.backend.backend() != "jax":
        return keras.Model(inputs, outputs, name=name)

    class MultiStep(keras.Model):
        def train_step(self, state, data):
            import jax
            import jax.numpy as jnp
            x, y = data[0], data[1]
            steps = y.shape[0] // batch_size
            if steps == 1:
                return super().train_step(state, (x, y))

            def split(t):
                return ops.reshape(t, (steps, batch_size) + tuple(t.shape[1:]))

            def one(carry, batch):
                logs, stepped = super(MultiStep, self).train_step(carry, batch)
                real = jnp.sum(batch[1]) > 0  # a topping-up step (labels all 0) leaves every variable as it was
                stepped = jax.tree.map(lambda new, old: jnp.where(real, new, old), stepped, carry)
                return stepped, (logs, real)

            state, (logs, real) = jax.lax.scan(one, state, (keras.tree.map_structure(split, x), split(y)))
            last = jnp.sum(real.astype("int32")) - 1  # the logs of the last real step
            return keras.tree.map_structure(lambda t: t[last], logs), state

    return MultiStep(inputs, outputs, name=name)


def on_device(model, block, train, val, num_classes: int, batch_size: int, recipe, validation_size: int):
    """(what is fitted, the in-step augmentation block, training batches, validation batches or None) for
    `model` on the fast path: a DeviceImages table of the training then the validation images (filled here),
    the recipe's `block` (RandAugment, erasing) after it, then the model; several steps per call on JAX."""
    x_train, y_train = train
    images = x_train if val is None else np.concatenate([x_train, val[0]])
    table = DeviceImages(len(images), *images.shape[1:], name="device_images")
    inputs = draw_inputs()
    x = table(inputs)
    if block is not None:
        x = block(x)
    trainee = multi_step_model(inputs, model(x), batch_size, name=f"{model.name}_on_device")
    table.assign(images)
    steps_per_call = recipe.steps_per_call if keras.backend.backend() == "jax" else 1
    batches = make_device_batches(y_train, num_classes, batch_size, images.shape[1:3], recipe.augment,
                                  recipe.seed, recipe.mixup_alpha, recipe.cutmix_alpha, recipe.mix_prob,
                                  recipe.repeats, steps_per_call)
    validation = None if val is None else make_validation_batches(len(x_train), val[1], num_classes,
                                                                  validation_size)
    return trainee, block, batches, validation
