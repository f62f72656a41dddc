"""BERT-base pre-training in Keras layers (the TensorFlow runner's BERT; nothing downloaded).

Called inside Runner.build() with keras/tf passed in, so importing this module imports neither.
"""

from __future__ import annotations


def bert_model(keras, tf, cfg: dict, seq_len: int):
    """BERT-base for pre-training: encoder + pooler + masked-LM and next-sentence heads.

    Layout and parameter count of Google's BERT / Hugging Face's BertForPreTraining
    (110,106,428 for BERT-base): word + position + token-type embeddings, LayerNorm,
    dropout; 12 post-LN encoder layers (Keras MultiHeadAttention with biases, exact GELU
    FFN); tanh pooler on [CLS]; MLM head = dense + GELU + LayerNorm, then the decoder
    *tied* to the word embeddings plus its own output bias, on the gathered masked
    positions; NSP head = dense 768 -> 2 on the pooled output. An attention mask only with
    real data (a 4th input, input_mask): the synthetic sequences have no padding.
    """
    init = keras.initializers.TruncatedNormal(stddev=cfg["initializer_range"])
    model = _pretraining_class(keras, tf, cfg, init)()
    n_pred = max(1, round(cfg["max_predictions_per_seq_fraction"] * seq_len))
    model(
        [tf.zeros([1, seq_len], tf.int32), tf.zeros([1, seq_len], tf.int32), tf.zeros([1, n_pred], tf.int32)],
        training=False,
    )
    return model


def _position_embedding_class(keras, tf, cfg: dict, init):
    class PositionEmbedding(keras.layers.Layer):
        def build(self, input_shape):
            self.embeddings = self.add_weight(
                shape=(cfg["max_position_embeddings"], cfg["hidden_size"]), initializer=init, name="embeddings"
            )

        def call(self, x):
            return x + tf.cast(self.embeddings[: tf.shape(x)[1]], x.dtype)[tf.newaxis]

    return PositionEmbedding


def _encoder_layer_class(keras, cfg: dict, init):
    L, H = keras.layers, cfg["hidden_size"]

    class EncoderLayer(L.Layer):
        def __init__(self, **kw):
            super().__init__(**kw)
            heads = cfg["num_attention_heads"]
            self.attention = L.MultiHeadAttention(
                heads, H // heads, dropout=cfg["attention_probs_dropout_prob"], kernel_initializer=init
            )
            self.attention_dropout = L.Dropout(cfg["hidden_dropout_prob"])
            self.attention_norm = L.LayerNormalization(epsilon=cfg["layer_norm_eps"])
            self.intermediate = L.Dense(cfg["intermediate_size"], kernel_initializer=init)
            self.output_dense = L.Dense(H, kernel_initializer=init)
            self.output_dropout = L.Dropout(cfg["hidden_dropout_prob"])
            self.output_norm = L.LayerNormalization(epsilon=cfg["layer_norm_eps"])

        def call(self, x, attention_mask=None, training=None):
            a = self.attention(x, x, attention_mask=attention_mask, training=training)
            x = self.attention_norm(x + self.attention_dropout(a, training=training))
            h = keras.activations.gelu(self.intermediate(x), approximate=False)
            return self.output_norm(x + self.output_dropout(self.output_dense(h), training=training))

    return EncoderLayer


def _pretraining_class(keras, tf, cfg: dict, init):
    L, H = keras.layers, cfg["hidden_size"]
    PositionEmbedding = _position_embedding_class(keras, tf, cfg, init)
    EncoderLayer = _encoder_layer_class(keras, cfg, init)

    class BertPretraining(keras.Model):
        def __init__(self):
            super().__init__(name="bert_base_pretraining")
            self.word_embeddings = L.Embedding(
                cfg["vocab_size"], H, embeddings_initializer=init, name="word_embeddings"
            )
            self.type_embeddings = L.Embedding(cfg["type_vocab_size"], H, embeddings_initializer=init, name="types")
            self.position_embeddings = PositionEmbedding(name="position_embeddings")
            self.embedding_norm = L.LayerNormalization(epsilon=cfg["layer_norm_eps"])
            self.embedding_dropout = L.Dropout(cfg["hidden_dropout_prob"])
            self.encoder = [EncoderLayer(name=f"layer_{i}") for i in range(cfg["num_hidden_layers"])]
            self.pooler = L.Dense(H, activation="tanh", kernel_initializer=init, name="pooler")
            self.mlm_transform = L.Dense(H, kernel_initializer=init, name="mlm_transform")
            self.mlm_norm = L.LayerNormalization(epsilon=cfg["layer_norm_eps"], name="mlm_norm")
            self.nsp = L.Dense(2, kernel_initializer=init, name="nsp")
            self.mlm_bias = self.add_weight(shape=(cfg["vocab_size"],), initializer="zeros", name="mlm_bias")

        def call(self, inputs, training=None):
            input_ids, token_type_ids, masked_positions = inputs[:3]
            mask = None
            if len(inputs) > 3:  # input_mask [batch, seq]: no attention to padding
                keys = tf.cast(inputs[3], tf.bool)[:, tf.newaxis, :]
                mask = tf.logical_and(keys, tf.ones_like(keys)[:, 0, :, tf.newaxis])  # [batch, seq, seq]
            x = self.word_embeddings(input_ids) + self.type_embeddings(token_type_ids)
            x = self.embedding_dropout(self.embedding_norm(self.position_embeddings(x)), training=training)
            for layer in self.encoder:
                x = layer(x, attention_mask=mask, training=training)
            pooled = self.pooler(x[:, 0])
            h = tf.gather(x, masked_positions, batch_dims=1)  # [batch, n_pred, H]
            h = self.mlm_norm(keras.activations.gelu(self.mlm_transform(h), approximate=False))
            table = tf.cast(self.word_embeddings.embeddings, h.dtype)
            mlm_logits = tf.matmul(h, table, transpose_b=True) + tf.cast(self.mlm_bias, h.dtype)
            return mlm_logits, self.nsp(pooled)

    return BertPretraining
