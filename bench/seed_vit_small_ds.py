"""The seed: keras.io "Train a Vision Transformer on small datasets" (vit_small_ds), as published,
with only the change it needs to run on Keras 3.15 (`_compute_attention` takes the new arguments).
Its other bugs are kept on purpose (tau is a plain tf.Variable, so it is neither trained nor saved; the
warmup-cosine schedule is never given to the optimizer): this is the baseline the benchmark measures.
Sizes are parameters so it can be built at our preset's geometry.
"""

import math

import keras
import tensorflow as tf
from keras import layers


def build_seed_model(x_train, num_classes, image_size=72, patch_size=6, projection_dim=64, num_heads=4,
                     key_dim=64, transformer_units=(128, 64), transformer_layers=8, mlp_head_units=(2048, 1024),
                     layer_norm_eps=1e-6, vanilla=False):
    num_patches = (image_size // patch_size) ** 2

    data_augmentation = keras.Sequential(
        [layers.Normalization(), layers.Resizing(image_size, image_size), layers.RandomFlip("horizontal"),
         layers.RandomRotation(factor=0.02), layers.RandomZoom(height_factor=0.2, width_factor=0.2)],
        name="data_augmentation")
    data_augmentation.layers[0].adapt(x_train)

    class ShiftedPatchTokenization(layers.Layer):
        def __init__(self, image_size=image_size, patch_size=patch_size, num_patches=num_patches,
                     projection_dim=projection_dim, vanilla=False, **kwargs):
            super().__init__(**kwargs)
            self.vanilla = vanilla
            self.image_size = image_size
            self.patch_size = patch_size
            self.half_patch = patch_size // 2
            self.flatten_patches = layers.Reshape((num_patches, -1))
            self.projection = layers.Dense(units=projection_dim)
            self.layer_norm = layers.LayerNormalization(epsilon=layer_norm_eps)

        def crop_shift_pad(self, images, mode):
            if mode == "left-up":
                crop_height, crop_width, shift_height, shift_width = self.half_patch, self.half_patch, 0, 0
            elif mode == "left-down":
                crop_height, crop_width, shift_height, shift_width = 0, self.half_patch, self.half_patch, 0
            elif mode == "right-up":
                crop_height, crop_width, shift_height, shift_width = self.half_patch, 0, 0, self.half_patch
            else:
                crop_height, crop_width, shift_height, shift_width = 0, 0, self.half_patch, self.half_patch
            crop = tf.image.crop_to_bounding_box(images, offset_height=crop_height, offset_width=crop_width,
                                                 target_height=self.image_size - self.half_patch,
                                                 target_width=self.image_size - self.half_patch)
            return tf.image.pad_to_bounding_box(crop, offset_height=shift_height, offset_width=shift_width,
                                                target_height=self.image_size, target_width=self.image_size)

        def call(self, images):
            if not self.vanilla:
                images = tf.concat([images, self.crop_shift_pad(images, mode="left-up"),
                                    self.crop_shift_pad(images, mode="left-down"),
                                    self.crop_shift_pad(images, mode="right-up"),
                                    self.crop_shift_pad(images, mode="right-down")], axis=-1)
            patches = tf.image.extract_patches(images=images, sizes=[1, self.patch_size, self.patch_size, 1],
                                               strides=[1, self.patch_size, self.patch_size, 1],
                                               rates=[1, 1, 1, 1], padding="VALID")
            flat_patches = self.flatten_patches(patches)
            if not self.vanilla:
                tokens = self.layer_norm(flat_patches)
                tokens = self.projection(tokens)
            else:
                tokens = self.projection(flat_patches)
            return (tokens, patches)

    class PatchEncoder(layers.Layer):
        def __init__(self, num_patches=num_patches, projection_dim=projection_dim, **kwargs):
            super().__init__(**kwargs)
            self.num_patches = num_patches
            self.position_embedding = layers.Embedding(input_dim=num_patches, output_dim=projection_dim)
            self.positions = tf.range(start=0, limit=self.num_patches, delta=1)

        def call(self, encoded_patches):
            return encoded_patches + self.position_embedding(self.positions)

    class MultiHeadAttentionLSA(layers.MultiHeadAttention):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.tau = tf.Variable(math.sqrt(float(self._key_dim)), trainable=True)

        # The one fix: Keras 3.15 passes two more arguments.
        def _compute_attention(self, query, key, value, attention_mask=None, training=None,
                               return_attention_scores=False, use_causal_mask=False):
            query = tf.multiply(query, 1.0 / self.tau)
            attention_scores = tf.einsum(self._dot_product_equation, key, query)
            attention_scores = self._masked_softmax(attention_scores, attention_mask)
            attention_scores_dropout = self._dropout_layer(attention_scores, training=training)
            attention_output = tf.einsum(self._combine_equation, attention_scores_dropout, value)
            return attention_output, attention_scores

    def mlp(x, hidden_units, dropout_rate):
        for units in hidden_units:
            x = layers.Dense(units, activation=tf.nn.gelu)(x)
            x = layers.Dropout(dropout_rate)(x)
        return x

    diag_attn_mask = 1 - tf.eye(num_patches)
    diag_attn_mask = tf.cast([diag_attn_mask], dtype=tf.int8)

    inputs = layers.Input(shape=(32, 32, 3))
    augmented = data_augmentation(inputs)
    (tokens, _) = ShiftedPatchTokenization(vanilla=vanilla)(augmented)
    encoded_patches = PatchEncoder()(tokens)
    for _ in range(transformer_layers):
        x1 = layers.LayerNormalization(epsilon=1e-6)(encoded_patches)
        if not vanilla:
            attention_output = MultiHeadAttentionLSA(num_heads=num_heads, key_dim=key_dim, dropout=0.1)(
                x1, x1, attention_mask=diag_attn_mask)
        else:
            attention_output = layers.MultiHeadAttention(num_heads=num_heads, key_dim=key_dim, dropout=0.1)(x1, x1)
        x2 = layers.Add()([attention_output, encoded_patches])
        x3 = layers.LayerNormalization(epsilon=1e-6)(x2)
        x3 = mlp(x3, hidden_units=list(transformer_units), dropout_rate=0.1)
        encoded_patches = layers.Add()([x3, x2])
    representation = layers.LayerNormalization(epsilon=1e-6)(encoded_patches)
    representation = layers.Flatten()(representation)
    representation = layers.Dropout(0.5)(representation)
    features = mlp(representation, hidden_units=list(mlp_head_units), dropout_rate=0.5)
    logits = layers.Dense(num_classes)(features)
    return keras.Model(inputs=inputs, outputs=logits)


def compile_seed(model, learning_rate=0.001, weight_decay=0.0001):
    optimizer = keras.optimizers.AdamW(learning_rate=learning_rate, weight_decay=weight_decay)
    model.compile(optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy"),
                           keras.metrics.SparseTopKCategoricalAccuracy(5, name="top-5-accuracy")])
    return model
