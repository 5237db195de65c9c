"""The misconceptions students have in the attention exercise, one entry each.

Sources: the course's lessons (the √d_k scaling, the causal mask and «¿se filtra el futuro?»,
the heads' split and merge, the fused version), the project's buggy corpus
(tests/submissions/buggy, manifest.yml) and what the suite's failures show.

Each entry says, for the student, what the mistake is and what it does (`es`, `en`); which
properties of its class its failure can explain (`explains`); how to make it from the reference
solution (`edits`: AST edits of mutation.py); and what a module with that mistake computes
(`switches` of model.py: a float64 numpy alternative to the reference). `probe` says where the
difference shows (see Misconception.probe). `kind`: "numeric" (outputs differ in eval),
"dropout" (they differ only through dropout: in train mode, or with dropout > 0 in eval) or
"structural" (outputs equal the reference's: parameters, buffers, errors or the calls made differ).
A structural entry's `shows_as` lists the failures (property, code) that only its mistake raises:
no value can name it, its failure code does (properties/diagnosis.py). An entry whose failure
other mistakes raise too (SDPA not called: by hand, or no attention at all) has none.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from . import model
from .mutation import Replace as R
from .mutation import ReplaceStatement as S

SA, MHA, CSA = "SelfAttention", "MultiHeadAttention", "CausalSelfAttention"
COMPUTE = {SA: model.self_attention, MHA: model.multi_head_attention, CSA: model.causal_self_attention}
KINDS = ("numeric", "dropout", "structural")


@dataclass(frozen=True)
class Misconception:
    id: str
    cls: str
    es: str
    en: str
    explains: tuple
    edits: tuple
    switches: dict = field(default_factory=dict)
    kind: str = "numeric"
    probe: dict = field(default_factory=dict)
    seen_in: str = ""  # where it comes from: corpus file, lesson, suite
    shows_as: tuple = ()  # (property, failure code) pairs that only this mistake raises (structural ones)

    def explanation(self, language="es"):
        return self.es if language == "es" else self.en

    def mutate(self, source=None):
        """The reference solution (or `source`) with this misconception, as source text."""
        from .mutation import apply

        return apply(self.edits, source)

    def describe_edits(self):
        return [edit.describe() for edit in self.edits]

    def compute(self, params, *args, **context):
        """What a module with this misconception returns, in float64: the arguments of
        properties/reference.py's function for its class (SelfAttention: x, mask=None;
        MultiHeadAttention: heads, query, key, value, mask=None; CausalSelfAttention: heads, x)
        and the context of model.py (train, p, drop; block_size and fused for the causal one)."""
        return COMPUTE[self.cls](params, *args, **context, **self.switches)


def entry(id, cls, es, en, explains, edits, switches=None, kind="numeric", probe=None, seen_in="", shows_as=()):
    return Misconception(id, cls, es, en, tuple(explains), tuple(edits), dict(switches or {}), kind, dict(probe or {}),
                         seen_in, tuple(tuple(pair) for pair in shows_as))


SA_SCORES = "Q @ K.transpose(-2, -1) / math.sqrt(self.d_k)"
SA_MASK = 'scores.masked_fill(mask == 0, float("-inf"))'
SA_SOFTMAX = "weights = torch.softmax(scores, dim=-1)"
SA_IF_MASK = 'if mask is not None:\n    scores = scores.masked_fill(mask == 0, float("-inf"))'
MHA_SCORES = "Q @ K.transpose(-2, -1) / math.sqrt(self.d_k)"
MHA_WEIGHTS = "weights = self.dropout(torch.softmax(scores, dim=-1))"
CSA_SCORES = "q @ k.transpose(-2, -1) / math.sqrt(hs)"
CSA_MASK = 'att.masked_fill(~self.mask[:, :, :T, :T], float("-inf"))'
CSA_TRIL = "torch.tril(torch.ones(cfg.block_size, cfg.block_size, dtype=torch.bool))"
NO_CAUSAL_MASK = 1 << 20  # a tril diagonal past any block_size: every position open (model.causal_self_attention)
CSA_DROP = "att = self.attn_drop(F.softmax(att, dim=-1))"
CSA_SDPA = "F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=p)"
CSA_P = "p = self.attn_drop.p if self.training else 0.0"
SA_SCORE_PROPS = ("scale", "reference_match")
MHA_CONTEXT = "(weights @ V).transpose(1, 2).contiguous().view(batch_size, -1, self.d_model)"

CATALOG = (
    # ---- SelfAttention ---------------------------------------------------------------------
    entry("sa_no_scale", SA,
          "No escalas los puntajes por 1/√d_k: con d_k grande la softmax se satura (casi one-hot) y sus "
          "gradientes se apagan.",
          "You do not scale the scores by 1/√d_k: with a large d_k the softmax saturates (almost one-hot) and its "
          "gradients vanish.",
          SA_SCORE_PROPS, [R(SA, "forward", SA_SCORES, "Q @ K.transpose(-2, -1)")],
          {"scale": "none"}, seen_in="buggy/sa_no_scaling; lesson 003"),
    entry("sa_scale_by_d_k", SA,
          "Divides por d_k, no por √d_k: con d_k grande la softmax se aplana.",
          "You divide by d_k, not by √d_k: with a large d_k the softmax flattens out.",
          SA_SCORE_PROPS, [R(SA, "forward", SA_SCORES, "Q @ K.transpose(-2, -1) / self.d_k")],
          {"scale": "d_k"}, seen_in="buggy/sa_scale_by_d_k"),
    entry("sa_scale_by_d_model", SA,
          "Escalas por √d_model en vez de √d_k: solo coincide cuando d_k = d_model.",
          "You scale by √d_model instead of √d_k: it is only right when d_k = d_model.",
          SA_SCORE_PROPS, [S(SA, "__init__", "self.d_k = d_k", "self.d_k = d_k\nself.d_model = d_model"),
                           R(SA, "forward", SA_SCORES, "Q @ K.transpose(-2, -1) / math.sqrt(self.d_model)")],
          {"scale": "sqrt_d_model"}, seen_in="buggy/sa_sqrt_d_model_scale"),
    entry("sa_scale_by_length", SA,
          "Escalas por la raíz del largo de la secuencia (el número de keys), no por √d_k: la escala "
          "depende de d_k, la dimensión de Q y K, y no de cuántos tokens hay.",
          "You scale by the square root of the sequence's length (the number of keys), not by √d_k: the "
          "scale depends on d_k, the size of Q and K, not on how many tokens there are.",
          SA_SCORE_PROPS, [R(SA, "forward", SA_SCORES, "Q @ K.transpose(-2, -1) / math.sqrt(K.size(-2))")],
          {"scale": "sqrt_keys"}, seen_in="outside round, session 23 (sa_scale_by_sqrt_T)"),
    entry("sa_softmax_query_axis", SA,
          "Aplicas la softmax sobre el eje de las queries (dim=-2): suman 1 las columnas, no las filas; cada "
          "query debería repartir su atención entre las keys.",
          "You apply the softmax over the query axis (dim=-2): the columns sum to 1, not the rows; each query "
          "should spread its attention over the keys.",
          ("rows_sum_to_one", "reference_match", "scale", "masked_zero", "large_inputs"),
          [R(SA, "forward", "torch.softmax(scores, dim=-1)", "torch.softmax(scores, dim=-2)")],
          {"softmax_axis": -2}, seen_in="buggy/sa_softmax_wrong_dim"),
    entry("sa_weights_returned_transposed", SA,
          "Devuelves los pesos transpuestos: la salida está bien, pero en los pesos que devuelves suman 1 las "
          "columnas, no las filas. Devuelve el mismo tensor que multiplicas por V, sin transponerlo.",
          "You return the weights transposed: the output is right, but in the weights you return the columns "
          "sum to 1, not the rows. Return the very tensor you multiply by V, without transposing it.",
          ("rows_sum_to_one", "masked_zero", "scale", "reference_match", "large_inputs"),
          [R(SA, "forward", "weights @ V, weights", "weights @ V, weights.transpose(-2, -1)")],
          {"weights_transposed": True}, seen_in="outside round, session 32 (sa_weights_returned_transposed)"),
    entry("sa_mask_inverted", SA,
          "Inviertes la máscara (tapas donde mask == 1): la atención va justo a las posiciones prohibidas.",
          "You invert the mask (you block where mask == 1): attention goes exactly to the forbidden positions.",
          ("masked_zero", "reference_match", "rows_sum_to_one", "large_inputs", "device"),
          [R(SA, "forward", SA_MASK, 'scores.masked_fill(mask == 1, float("-inf"))')],
          {"mask_blocks": 1}, probe={"mask": True}, seen_in="buggy/sa_mask_flipped"),
    entry("sa_mask_fill_zero", SA,
          "Rellenas las posiciones tapadas con 0 en vez de -inf: e⁰ = 1, así que siguen recibiendo peso.",
          "You fill masked positions with 0 instead of -inf: e⁰ = 1, so they still get weight.",
          ("masked_zero", "reference_match", "large_inputs"),
          [R(SA, "forward", SA_MASK, "scores.masked_fill(mask == 0, 0.0)")],
          {"fill": 0.0}, probe={"mask": True}, seen_in="lesson 003 (por qué -∞)"),
    entry("sa_mask_finite_fill", SA,
          "Tapas con -1e4 en vez de -inf: con puntajes grandes (entradas de escala 1000) las posiciones "
          "tapadas vuelven a recibir peso.",
          "You mask with -1e4 instead of -inf: with large scores (inputs of scale 1000) masked positions get "
          "weight again.",
          ("large_inputs",), [R(SA, "forward", SA_MASK, "scores.masked_fill(mask == 0, -1e4)")],
          {"fill": -1e4}, probe={"mask": True, "scale": 1e3}, seen_in="buggy/sa_mask_minus_1e4"),
    entry("sa_mask_after_softmax", SA,
          "Aplicas la máscara después de la softmax (pones ceros) sin renormalizar: las filas ya no suman 1 "
          "y los pesos no son los de la fórmula.",
          "You apply the mask after the softmax (zeroing weights) without renormalising: rows no longer sum "
          "to 1 and the weights are not the formula's.",
          ("rows_sum_to_one", "reference_match", "large_inputs"),
          [S(SA, "forward", SA_IF_MASK, ""),
           S(SA, "forward", SA_SOFTMAX, SA_SOFTMAX + "\nif mask is not None:\n    weights = weights.masked_fill(mask == 0, 0.0)")],
          {"mask_after_softmax": True}, probe={"mask": True}, seen_in="suite (rows_sum_to_one with a mask)"),
    entry("sa_value_from_key", SA,
          "Multiplicas los pesos por K en vez de por V: W_V nunca se usa.",
          "You multiply the weights by K instead of V: W_V is never used.",
          ("reference_match", "gradients"), [R(SA, "forward", "weights @ V", "weights @ K")],
          {"value_from_key": True}, seen_in="buggy/sa_value_from_key"),
    entry("sa_query_key_swapped", SA,
          "Calculas K·Qᵀ en vez de Q·Kᵀ: la fila i dice cuánto se parece la key i a cada query, no cuánto "
          "atiende la query i a cada key.",
          "You compute K·Qᵀ instead of Q·Kᵀ: row i says how much key i resembles each query, not how much "
          "query i attends to each key.",
          ("reference_match", "scale"), [R(SA, "forward", SA_SCORES, "K @ Q.transpose(-2, -1) / math.sqrt(self.d_k)")],
          {"swap_qk": True}, seen_in="lesson 003 (queries, keys y values)"),
    entry("sa_no_softmax", SA,
          "Olvidas la softmax: los puntajes escalados no son pesos (ni positivos ni suman 1).",
          "You forget the softmax: scaled scores are not weights (neither positive nor summing to 1).",
          ("rows_sum_to_one", "reference_match", "scale", "masked_zero", "large_inputs", "gradients", "device"),
          [S(SA, "forward", SA_SOFTMAX, "weights = scores")],
          {"no_softmax": True}, probe={"mask": False}, seen_in="lesson 003 (normalizamos con softmax)"),
    entry("sa_bias", SA,
          "Pones sesgo (bias) en W_Q, W_K o W_V: el contrato pide bias=False en las tres (3·d_model·d_k parámetros).",
          "Your W_Q, W_K or W_V has a bias: the contract asks for bias=False in all three (3·d_model·d_k parameters).",
          ("parameter_count",),
          [R(SA, "__init__", "nn.Linear(d_model, d_k, bias=False)", "nn.Linear(d_model, d_k)", count=3)],
          kind="structural", seen_in="buggy/sa_bias_true", shows_as=[("parameter_count", "unexpected_bias")]),
    # ---- MultiHeadAttention ----------------------------------------------------------------
    entry("mha_no_scale", MHA,
          "No escalas los puntajes por 1/√d_k: con d_k grande la softmax se satura y sus gradientes se apagan.",
          "You do not scale the scores by 1/√d_k: with a large d_k the softmax saturates and its gradients vanish.",
          SA_SCORE_PROPS, [R(MHA, "forward", MHA_SCORES, "Q @ K.transpose(-2, -1)")],
          {"scale": "none"}, seen_in="buggy/mha_no_scaling"),
    entry("mha_scale_by_d_model", MHA,
          "Escalas por √d_model en vez de por √d_k de cada cabeza (d_k = d_model / h).",
          "You scale by √d_model instead of each head's √d_k (d_k = d_model / h).",
          SA_SCORE_PROPS, [R(MHA, "forward", MHA_SCORES, "Q @ K.transpose(-2, -1) / math.sqrt(self.d_model)")],
          {"scale": "sqrt_d_model"}, probe={"heads": 2}, seen_in="buggy/mha_scale_by_d_model"),
    entry("mha_scale_by_length", MHA,
          "Escalas por la raíz del largo de la secuencia de keys, no por √d_k: la escala depende de d_k, "
          "la dimensión de cada cabeza, y no de cuántos tokens hay.",
          "You scale by the square root of the key sequence's length, not by √d_k: the scale depends on "
          "d_k, each head's size, not on how many tokens there are.",
          SA_SCORE_PROPS, [R(MHA, "forward", MHA_SCORES, "Q @ K.transpose(-2, -1) / math.sqrt(K.size(-2))")],
          {"scale": "sqrt_keys"}, probe={"heads": 2}, seen_in="outside round, session 23 (sa_scale_by_sqrt_T, other class)"),
    entry("mha_scale_integer_root", MHA,
          "Divides por math.isqrt(d_k), la raíz entera: solo es √d_k cuando d_k es un cuadrado perfecto "
          "(con d_k = 8 divides por 2 y no por 2.83). Usa math.sqrt(d_k).",
          "You divide by math.isqrt(d_k), the integer root: it is √d_k only when d_k is a perfect square "
          "(with d_k = 8 you divide by 2, not 2.83). Use math.sqrt(d_k).",
          SA_SCORE_PROPS, [R(MHA, "forward", MHA_SCORES, "Q @ K.transpose(-2, -1) / math.isqrt(self.d_k)")],
          {"scale": "isqrt_d_k"}, probe={"heads": 2, "d_k": 3}, seen_in="outside round, session 23 (mha_scale_isqrt)"),
    entry("mha_scale_by_d_k", MHA,
          "Divides por d_k, no por √d_k: con d_k grande la softmax se aplana.",
          "You divide by d_k, not by √d_k: with a large d_k the softmax flattens out.",
          SA_SCORE_PROPS, [R(MHA, "forward", MHA_SCORES, "Q @ K.transpose(-2, -1) / self.d_k")],
          {"scale": "d_k"}, probe={"heads": 2, "d_k": 3}, seen_in="buggy/sa_scale_by_d_k (same mistake, other class)"),
    entry("mha_softmax_query_axis", MHA,
          "Aplicas la softmax sobre el eje de las queries (dim=-2): suman 1 las columnas, no las filas.",
          "You apply the softmax over the query axis (dim=-2): the columns sum to 1, not the rows.",
          ("rows_sum_to_one", "reference_match", "scale", "masked_zero", "large_inputs", "train_dropout"),
          [R(MHA, "forward", "torch.softmax(scores, dim=-1)", "torch.softmax(scores, dim=-2)")],
          {"softmax_axis": -2}, seen_in="buggy/mha_softmax_wrong_dim"),
    entry("mha_mask_inverted", MHA,
          "Inviertes la máscara (tapas donde mask == 1): la atención va justo a las posiciones prohibidas.",
          "You invert the mask (you block where mask == 1): attention goes exactly to the forbidden positions.",
          ("masked_zero", "reference_match", "rows_sum_to_one", "large_inputs", "device"),
          [R(MHA, "forward", 'scores.masked_fill(mask == 0, float("-inf"))', 'scores.masked_fill(mask == 1, float("-inf"))')],
          {"mask_blocks": 1}, probe={"mask": True}, seen_in="buggy/mha_mask_flipped"),
    entry("mha_mask_without_head_axis", MHA,
          "A una máscara (B, Tq, Tk) no le das el eje de las cabezas como corresponde: sin mask.unsqueeze(1) "
          "(o con unsqueeze(0)), su batch queda frente a las cabezas y se difunde contra (h, Tq, Tk); con "
          "mask.repeat(h, 1, 1) sobre puntajes (B·h, Tq, Tk), la máscara de cada ejemplo va a las filas de "
          "otro (ahí corresponde repeat_interleave(h, dim=0)). En los dos casos el batch se confunde con las "
          "cabezas (con B ≠ h, falla o mezcla los ejemplos de otra manera).",
          "You do not give a (B, Tq, Tk) mask its head axis the right way: without mask.unsqueeze(1) (or with "
          "unsqueeze(0)), its batch faces the heads and broadcasts against (h, Tq, Tk); with mask.repeat(h, 1, 1) "
          "on (B·h, Tq, Tk) scores, each example's mask goes to another's rows (there, repeat_interleave(h, "
          "dim=0) is right). Either way the batch is mistaken for the heads (when B ≠ h, it fails or mixes the "
          "examples another way).",
          ("masked_zero", "rows_sum_to_one", "reference_match", "large_inputs", "device"),
          [S(MHA, "forward", "if mask.dim() == 3:\n    mask = mask.unsqueeze(1)", "")],
          {"mask_head_axis": False}, probe={"mask": True, "batch": 2, "heads": 2},
          seen_in="suite (masks of shape (B,Tq,Tk))"),
    entry("mha_split_without_transpose", MHA,
          "En split_heads haces view directo a (B, h, T, d_k) sin transponer: cada «cabeza» mezcla trozos "
          "de varios tokens.",
          "In split_heads you view straight to (B, h, T, d_k) without transposing: each 'head' mixes pieces "
          "of several tokens.",
          ("split_heads", "reference_match", "scale", "masked_zero", "rows_sum_to_one", "large_inputs", "train_dropout",
           "batch_independence"),
          [R(MHA, "split_heads", "x.view(batch_size, -1, self.num_heads, self.d_k).transpose(1, 2)",
             "x.view(batch_size, self.num_heads, -1, self.d_k)")],
          {"split_transpose": False}, probe={"heads": 2}, seen_in="buggy/mha_split_without_transpose"),
    entry("mha_merge_without_transpose", MHA,
          "Al unir las cabezas haces view sin transponer de vuelta: (B, h, T, d_k) → (B, T, d_model) mezcla "
          "tokens y cabezas en la salida.",
          "When merging the heads you view without transposing back: (B, h, T, d_k) → (B, T, d_model) mixes "
          "tokens and heads in the output.",
          ("reference_match", "train_dropout"),
          [R(MHA, "forward", MHA_CONTEXT, "(weights @ V).contiguous().view(batch_size, -1, self.d_model)")],
          {"merge_transpose": False}, probe={"heads": 2}, seen_in="buggy/mha_merge_without_transpose"),
    entry("mha_key_value_swapped", MHA,
          "Intercambias key y value: las keys salen de `value` y los values de `key`. En auto-atención no se "
          "nota; en atención cruzada sí.",
          "You swap key and value: the keys come from `value` and the values from `key`. Self-attention hides "
          "it; cross-attention does not.",
          ("reference_match", "scale", "train_dropout"),
          [R(MHA, "forward", "self.W_K(key)", "self.W_K(value)"), R(MHA, "forward", "self.W_V(value)", "self.W_V(key)")],
          {"key_value_swapped": True}, seen_in="lesson 000 (atención cruzada)"),
    entry("mha_projections_transposed", MHA,
          "Aplicas W_Q, W_K y W_V como x @ W.weight: nn.Linear guarda su matriz como (salida, entrada) y "
          "calcula x @ W.weightᵀ. Con capas cuadradas no hay error de formas, pero Q, K y V son otras: "
          "llama a las capas, self.W_Q(query).",
          "You apply W_Q, W_K and W_V as x @ W.weight: nn.Linear stores its matrix as (out, in) and computes "
          "x @ W.weightᵀ. With square layers there is no shape error, but Q, K and V are others: call the "
          "layers, self.W_Q(query).",
          ("reference_match",),
          [R(MHA, "forward", "self.W_Q(query)", "query @ self.W_Q.weight"),
           R(MHA, "forward", "self.W_K(key)", "key @ self.W_K.weight"),
           R(MHA, "forward", "self.W_V(value)", "value @ self.W_V.weight")],
          {"projections_transposed": True}, seen_in="session 17 (x @ W.weight with square layers)"),
    entry("mha_value_from_key", MHA,
          "Proyectas los values desde `key` en vez de `value`: en atención cruzada (key ≠ value) el "
          "resultado es otro.",
          "You project the values from `key` instead of `value`: in cross-attention (key ≠ value) the result "
          "differs.",
          ("reference_match", "train_dropout", "gradients"), [R(MHA, "forward", "self.W_V(value)", "self.W_V(key)")],
          {"value_from_key": True}, seen_in="buggy/mha_value_from_key"),
    entry("mha_no_output_projection", MHA,
          "No aplicas la proyección de salida W_O: concatenas las cabezas y devuelves eso. Aplica "
          "self.W_O al resultado, también con una sola cabeza.",
          "You do not apply the output projection W_O: you concatenate the heads and return that. Apply "
          "self.W_O to the result, with a single head too.",
          ("parameter_count", "reference_match", "rows_sum_to_one", "masked_zero", "scale", "batch_independence",
           "eval_deterministic", "train_dropout", "gradients", "large_inputs", "device"),
          [S(MHA, "__init__", "self.W_O = nn.Linear(d_model, d_model, bias=False)", ""),
           R(MHA, "forward", "self.W_O(context)", "context")],
          {"output_projection": False}, seen_in="buggy/mha_missing_w_o; lesson 004"),
    entry("mha_dropout_in_eval", MHA,
          "El dropout actúa también en eval(): dos llamadas iguales dan resultados distintos y las filas de "
          "pesos no suman 1.",
          "Dropout acts in eval() too: two equal calls give different results and the weight rows do not "
          "sum to 1.",
          ("eval_deterministic", "reference_match", "rows_sum_to_one", "masked_zero", "scale", "large_inputs",
           "train_dropout", "batch_independence"),
          [R(MHA, "forward", "self.dropout(torch.softmax(scores, dim=-1))",
             "F.dropout(torch.softmax(scores, dim=-1), p=self.dropout.p, training=True)")],
          {"dropout_in_eval": True}, kind="dropout", probe={"train": False, "p": 0.5},
          seen_in="buggy/mha_dropout_in_eval"),
    entry("mha_no_dropout", MHA,
          "En train() el dropout no descarta ningún peso: o no aplicas self.dropout a los pesos, o su p es 0 "
          "(lo creas con p=0 en vez de la probabilidad `dropout` que recibe el constructor, o cambias "
          "self.dropout.p después).",
          "In train() dropout drops no weight: either you do not apply self.dropout to the weights, or its p "
          "is 0 (you create it with p=0 instead of the `dropout` rate the constructor receives, or change "
          "self.dropout.p later).",
          ("train_dropout",), [R(MHA, "forward", "self.dropout(torch.softmax(scores, dim=-1))", "torch.softmax(scores, dim=-1)")],
          {"dropout_at": "none"}, kind="dropout", probe={"train": True, "p": 0.5}, seen_in="buggy/mha_no_dropout"),
    entry("mha_dropout_ignores_p", MHA,
          "Usas nn.Dropout(0.1) fijo en vez de la probabilidad `dropout` que recibe el constructor.",
          "You use a fixed nn.Dropout(0.1) instead of the `dropout` rate the constructor receives.",
          ("train_dropout",), [R(MHA, "__init__", "nn.Dropout(dropout)", "nn.Dropout(0.1)")],
          {"dropout_rate": 0.1}, kind="dropout", probe={"train": True, "p": 0.5}, seen_in="buggy/mha_dropout_ignores_p"),
    entry("mha_output_from_undropped_weights", MHA,
          "Calculas la salida con los pesos antes del dropout y devuelves los pesos después: la salida no "
          "sale de los pesos que devuelves.",
          "You compute the output from the weights before dropout and return the weights after it: the output "
          "does not come from the weights you return.",
          ("train_dropout",),
          [S(MHA, "forward", MHA_WEIGHTS, "probs = torch.softmax(scores, dim=-1)\nweights = self.dropout(probs)"),
           R(MHA, "forward", MHA_CONTEXT, "(probs @ V).transpose(1, 2).contiguous().view(batch_size, -1, self.d_model)")],
          {"dropout_at": "undropped_output"}, kind="dropout", probe={"train": True, "p": 0.5},
          seen_in="buggy/mha_output_from_undropped_weights"),
    entry("mha_dropout_on_output", MHA,
          "Aplicas el dropout a la salida en vez de a los pesos de atención (después de la softmax).",
          "You apply dropout to the output instead of the attention weights (after the softmax).",
          ("train_dropout",),
          [R(MHA, "forward", "self.dropout(torch.softmax(scores, dim=-1))", "torch.softmax(scores, dim=-1)"),
           R(MHA, "forward", "self.W_O(context)", "self.dropout(self.W_O(context))")],
          {"dropout_at": "output"}, kind="dropout", probe={"train": True, "p": 0.5}, seen_in="ENUNCIADO (dónde va el dropout)"),
    entry("mha_dropout_before_softmax", MHA,
          "Aplicas el dropout a los puntajes, antes de la softmax: un puntaje en 0 no es un peso en 0 y las "
          "filas siguen sumando 1.",
          "You apply dropout to the scores, before the softmax: a zero score is not a zero weight, and rows "
          "still sum to 1.",
          ("train_dropout",),
          [R(MHA, "forward", "self.dropout(torch.softmax(scores, dim=-1))", "torch.softmax(self.dropout(scores), dim=-1)")],
          {"dropout_at": "scores"}, kind="dropout", probe={"train": True, "p": 0.5, "mask": False},
          seen_in="ENUNCIADO (dropout después de la softmax)"),
    entry("mha_no_divisibility_check", MHA,
          "No compruebas que d_model sea divisible por num_heads: con d_model % h ≠ 0 las cabezas no pueden "
          "tener todas la misma d_k.",
          "You do not check that d_model is divisible by num_heads: with d_model % h ≠ 0 the heads cannot all "
          "have the same d_k.",
          ("divisibility_error",),
          [S(MHA, "__init__", 'if d_model % num_heads != 0:\n    raise ValueError("d_model must be divisible by num_heads")', "")],
          kind="structural", seen_in="buggy/mha_no_divisibility_check",
          shows_as=[("divisibility_error", "divisibility_no_error")]),
    entry("mha_bias", MHA,
          "Pones sesgo (bias) en alguna proyección: el contrato pide bias=False en las cuatro (4·d_model² parámetros).",
          "One of your projections has a bias: the contract asks for bias=False in all four (4·d_model² parameters).",
          ("parameter_count",),
          [R(MHA, "__init__", "nn.Linear(d_model, d_model, bias=False)", "nn.Linear(d_model, d_model)", count=4)],
          kind="structural", seen_in="buggy/mha_bias_true", shows_as=[("parameter_count", "unexpected_bias")]),
    # ---- CausalSelfAttention -----------------------------------------------------------------
    entry("causal_no_scale", CSA,
          "No escalas por 1/√hs en la ruta explícita: la softmax se satura y ya no coincide con la fusionada.",
          "You do not scale by 1/√hs in the explicit path: the softmax saturates and no longer matches the "
          "fused path.",
          ("reference_match", "fused_equivalence", "train_dropout"), [R(CSA, "forward", CSA_SCORES, "q @ k.transpose(-2, -1)")],
          {"scale": "none"}, seen_in="buggy/causal_no_scaling"),
    entry("causal_scale_by_n_embd", CSA,
          "Escalas por √C (n_embd) en vez de por √hs, el tamaño de cada cabeza (hs = C // n_head).",
          "You scale by √C (n_embd) instead of √hs, each head's size (hs = C // n_head).",
          ("reference_match", "fused_equivalence", "train_dropout"),
          [R(CSA, "forward", CSA_SCORES, "q @ k.transpose(-2, -1) / math.sqrt(C)")],
          {"scale": "sqrt_d_model"}, probe={"heads": 2}, seen_in="buggy/causal_scale_by_n_embd"),
    entry("causal_mask_inverted", CSA,
          "Olvidas el ~ de la máscara: tapas el pasado y el propio token en vez del futuro (y la última fila "
          "queda sin nada que atender).",
          "You forget the ~ on the mask: you block the past and the token itself instead of the future (and "
          "the last row has nothing left to attend to).",
          ("causality", "reference_match", "fused_equivalence", "large_inputs", "gradients", "batch_independence",
           "train_dropout"),
          [R(CSA, "forward", CSA_MASK, 'att.masked_fill(self.mask[:, :, :T, :T], float("-inf"))')],
          {"mask_blocks": 1}, seen_in="buggy/causal_mask_flipped"),
    entry("causal_mask_off_by_one", CSA,
          "La máscara causal deja ver un token de más (tril con diagonal=1): cada posición espía la siguiente.",
          "The causal mask lets one token too many through (tril with diagonal=1): each position peeks at "
          "the next one.",
          ("mask_buffer", "causality", "reference_match", "fused_equivalence", "large_inputs", "train_dropout"),
          [R(CSA, "__init__", CSA_TRIL, "torch.tril(torch.ones(cfg.block_size, cfg.block_size, dtype=torch.bool), diagonal=1)")],
          {"tril_diagonal": 1}, seen_in="buggy/causal_mask_off_by_one; lesson 003 (¿se filtra el futuro?)"),
    entry("causal_mask_missing", CSA,
          "No aplicas la máscara causal en el camino explícito: cada posición ve también las siguientes.",
          "You do not apply the causal mask on the explicit path: each position also sees the following ones.",
          ("causality", "reference_match", "fused_equivalence", "large_inputs", "train_dropout"),
          [R(CSA, "forward", CSA_MASK, "att")],
          {"tril_diagonal": NO_CAUSAL_MASK}, seen_in="an outside writer of wrong files (a mask skipped when T == block_size)"),
    entry("causal_mask_hides_self", CSA,
          "La máscara causal tapa también la diagonal (tril con diagonal=-1): un token no se ve a sí mismo y "
          "el primero no tiene nada que atender (NaN).",
          "The causal mask also blocks the diagonal (tril with diagonal=-1): a token cannot see itself and "
          "the first has nothing to attend to (NaN).",
          ("mask_buffer", "causality", "reference_match", "fused_equivalence", "large_inputs", "gradients",
           "batch_independence", "train_dropout"),
          [R(CSA, "__init__", CSA_TRIL, "torch.tril(torch.ones(cfg.block_size, cfg.block_size, dtype=torch.bool), diagonal=-1)")],
          {"tril_diagonal": -1}, seen_in="lesson 003 (posiciones ≤ i)"),
    entry("causal_mask_not_cropped", CSA,
          "Recortas la máscara desde la esquina equivocada (mask[:, :, -T:, :T]): solo es correcta cuando "
          "T == block_size.",
          "You crop the mask from the wrong corner (mask[:, :, -T:, :T]): it is only right when T == block_size.",
          ("causality", "reference_match", "fused_equivalence", "large_inputs", "train_dropout"),
          [R(CSA, "forward", "self.mask[:, :, :T, :T]", "self.mask[:, :, -T:, :T]")],
          {"mask_rows": "last"}, probe={"short": True}, seen_in="buggy/causal_mask_not_sliced; lesson 003 (recortamos la máscara)"),
    entry("causal_mask_fill_zero", CSA,
          "Rellenas el futuro con 0 en vez de -inf: e⁰ = 1, así que el futuro sigue pesando.",
          "You fill the future with 0 instead of -inf: e⁰ = 1, so the future still counts.",
          ("causality", "reference_match", "fused_equivalence", "large_inputs", "train_dropout"),
          [R(CSA, "forward", CSA_MASK, "att.masked_fill(~self.mask[:, :, :T, :T], 0.0)")],
          {"fill": 0.0}, seen_in="lesson 003 (e^-∞ = 0)"),
    entry("causal_mask_finite_fill", CSA,
          "Tapas el futuro con -1e4 en vez de -inf: con puntajes grandes el futuro vuelve a filtrarse.",
          "You mask the future with -1e4 instead of -inf: with large scores the future leaks again.",
          ("large_inputs",), [R(CSA, "forward", CSA_MASK, "att.masked_fill(~self.mask[:, :, :T, :T], -1e4)")],
          {"fill": -1e4}, probe={"scale": 1e3}, seen_in="buggy/causal_mask_minus_1e4"),
    entry("causal_mask_after_softmax", CSA,
          "Aplicas la máscara causal después de la softmax (pones ceros) sin renormalizar: los pesos del "
          "futuro quedan en 0, pero la softmax ya los sumó en su denominador, así que el futuro sigue influyendo "
          "y las filas no suman 1.",
          "You apply the causal mask after the softmax (zeroing weights) without renormalising: future weights "
          "are 0, but the softmax already summed them in its denominator, so the future still has an influence "
          "and rows do not sum to 1.",
          ("causality", "reference_match", "fused_equivalence", "large_inputs", "train_dropout"),
          [S(CSA, "forward", 'att = att.masked_fill(~self.mask[:, :, :T, :T], float("-inf"))', ""),
           S(CSA, "forward", CSA_DROP,
             "att = self.attn_drop(F.softmax(att, dim=-1).masked_fill(~self.mask[:, :, :T, :T], 0.0))")],
          {"mask_after_softmax": True}, seen_in="suite (the future leaks through the denominator)"),
    entry("causal_softmax_query_axis", CSA,
          "Aplicas la softmax sobre el eje de las queries (dim=-2): cada peso depende de queries posteriores, "
          "y el futuro se filtra.",
          "You apply the softmax over the query axis (dim=-2): each weight depends on later queries, and the "
          "future leaks.",
          ("causality", "reference_match", "fused_equivalence", "large_inputs", "train_dropout"),
          [R(CSA, "forward", "F.softmax(att, dim=-1)", "F.softmax(att, dim=-2)")],
          {"softmax_axis": -2}, seen_in="buggy/*_softmax_wrong_dim (same mistake, other class)"),
    entry("causal_qkv_order", CSA,
          "Separas qkv en otro orden (k, q, v): los nombres no corresponden a las rebanadas de la proyección.",
          "You split qkv in another order (k, q, v): the names do not match the projection's slices.",
          ("reference_match", "fused_equivalence", "train_dropout"),
          [S(CSA, "forward", "q, k, v = self.qkv(x).split(C, dim=2)", "k, q, v = self.qkv(x).split(C, dim=2)")],
          {"order": "kqv"}, seen_in="buggy/causal_qkv_order"),
    entry("causal_heads_without_transpose", CSA,
          "Separas las cabezas con un reshape directo a (B, h, T, hs), sin transponer: mezclas tokens entre "
          "cabezas y el futuro se filtra.",
          "You split the heads with a plain reshape to (B, h, T, hs), without transposing: tokens get mixed "
          "across heads and the future leaks.",
          ("causality", "reference_match", "fused_equivalence", "train_dropout", "large_inputs"),
          [R(CSA, "forward", f"{name}.view(B, T, self.n_head, hs).transpose(1, 2)", f"{name}.reshape(B, self.n_head, T, hs)")
           for name in "qkv"],
          {"heads_transpose": False}, probe={"heads": 2}, seen_in="buggy/causal_heads_no_transpose"),
    entry("causal_merge_without_transpose", CSA,
          "Al juntar las cabezas haces view sin transponer: (B, h, T, hs) → (B, T, C) mezcla posiciones, y la "
          "salida de un token depende de tokens futuros.",
          "When merging the heads you view without transposing: (B, h, T, hs) → (B, T, C) mixes positions, "
          "and a token's output depends on future tokens.",
          ("causality", "reference_match", "fused_equivalence", "train_dropout", "large_inputs"),
          [R(CSA, "forward", "y.transpose(1, 2).contiguous().view(B, T, C)", "y.contiguous().view(B, T, C)")],
          {"merge_transpose": False}, probe={"heads": 2}, seen_in="lesson 003 (concatena cabezas)"),
    entry("causal_fused_not_causal", CSA,
          "En la ruta fusionada olvidas is_causal=True: SDPA atiende a toda la secuencia, futuro incluido.",
          "In the fused path you forget is_causal=True: SDPA attends to the whole sequence, future included.",
          ("fused_equivalence", "train_dropout"),
          [R(CSA, "forward", CSA_SDPA, "F.scaled_dot_product_attention(q, k, v, dropout_p=p)")],
          {"fused_is_causal": False}, probe={"fused": True}, seen_in="buggy/causal_fused_not_causal; lesson 003"),
    entry("causal_fused_dropout_in_eval", CSA,
          "En la ruta fusionada pasas dropout_p también en eval(): SDPA aplica dropout siempre que "
          "dropout_p > 0.",
          "In the fused path you pass dropout_p in eval() too: SDPA applies dropout whenever dropout_p > 0.",
          ("fused_equivalence",), [S(CSA, "forward", CSA_P, "p = self.attn_drop.p")],
          {"fused_dropout": "always"}, kind="dropout", probe={"fused": True, "train": False, "p": 0.5},
          seen_in="buggy/causal_fused_dropout_in_eval"),
    entry("causal_fused_no_dropout_in_train", CSA,
          "En la ruta fusionada pasas dropout_p=0.0 también en train(): la atención fusionada nunca hace dropout.",
          "In the fused path you pass dropout_p=0.0 in train() too: fused attention never drops anything.",
          ("train_dropout",), [S(CSA, "forward", CSA_P, "p = 0.0")],
          {"fused_dropout": "never"}, kind="dropout", probe={"fused": True, "train": True, "p": 0.5},
          seen_in="buggy/causal_fused_no_dropout_in_train"),
    entry("causal_dropout_in_eval", CSA,
          "El dropout de atención actúa también en eval(): dos llamadas iguales dan resultados distintos.",
          "Attention dropout acts in eval() too: two equal calls give different results.",
          ("eval_deterministic", "reference_match", "fused_equivalence", "train_dropout", "batch_independence",
           "large_inputs", "causality"),
          [R(CSA, "forward", "self.attn_drop(F.softmax(att, dim=-1))",
             "F.dropout(F.softmax(att, dim=-1), p=self.attn_drop.p, training=True)")],
          {"attn_drop_in_eval": True}, kind="dropout", probe={"train": False, "p": 0.5},
          seen_in="buggy/causal_dropout_in_eval"),
    entry("causal_no_attn_drop", CSA,
          "Creas attn_drop pero no lo aplicas a los pesos en la ruta explícita.",
          "You create attn_drop but do not apply it to the weights in the explicit path.",
          ("train_dropout",), [R(CSA, "forward", "self.attn_drop(F.softmax(att, dim=-1))", "F.softmax(att, dim=-1)")],
          {"attn_drop": "none"}, kind="dropout", probe={"train": True, "p": 0.5}, seen_in="buggy/causal_no_attn_drop"),
    entry("causal_no_resid_drop", CSA,
          "Creas resid_drop pero no lo aplicas a la salida de proj.",
          "You create resid_drop but do not apply it to proj's output.",
          ("train_dropout",), [R(CSA, "forward", "self.resid_drop(self.proj(y))", "self.proj(y)")],
          {"resid_drop": "none"}, kind="dropout", probe={"train": True, "p": 0.5}, seen_in="buggy/causal_no_resid_drop"),
    entry("causal_resid_drop_before_proj", CSA,
          "Aplicas resid_drop antes de proj y no a su salida: los ceros del dropout se pierden en la proyección.",
          "You apply resid_drop before proj instead of to its output: the dropout's zeros are lost in the "
          "projection.",
          ("train_dropout",), [R(CSA, "forward", "self.resid_drop(self.proj(y))", "self.proj(self.resid_drop(y))")],
          {"resid_drop": "before_proj"}, kind="dropout", probe={"train": True, "p": 0.5},
          seen_in="buggy/causal_resid_drop_before_proj"),
    entry("causal_fused_by_hand", CSA,
          "Con fused=True reimplementas la atención a mano en vez de llamar a F.scaled_dot_product_attention.",
          "With fused=True you re-implement attention by hand instead of calling F.scaled_dot_product_attention.",
          ("fused_calls_sdpa",),
          [R(CSA, "forward", CSA_SDPA,
             'F.dropout(F.softmax((q @ k.transpose(-2, -1) / math.sqrt(hs)).masked_fill(~self.mask[:, :, :T, :T], '
             'float("-inf")), dim=-1), p=p, training=p > 0) @ v')],
          kind="structural", seen_in="buggy/causal_fused_manual"),  # sdpa_not_called: also a fused path with no attention
    entry("causal_mask_persistent", CSA,
          "Registras la máscara como buffer persistente: termina en el state_dict (pide persistent=False).",
          "You register the mask as a persistent buffer: it ends up in the state_dict (use persistent=False).",
          ("mask_buffer",),
          [R(CSA, "__init__", 'self.register_buffer("mask", mask.view(1, 1, cfg.block_size, cfg.block_size), persistent=False)',
             'self.register_buffer("mask", mask.view(1, 1, cfg.block_size, cfg.block_size))')],
          kind="structural", seen_in="buggy/causal_mask_persistent; lesson 003 (register_buffer)",
          shows_as=[("mask_buffer", "mask_persistent")]),
    entry("causal_no_bias", CSA,
          "Creas qkv o proj sin sesgo: el contrato pide bias en ambas (4·C² + 4·C parámetros).",
          "You create qkv or proj without a bias: the contract asks for one in both (4·C² + 4·C parameters).",
          ("parameter_count",),
          [R(CSA, "__init__", "nn.Linear(cfg.n_embd, 3 * cfg.n_embd)", "nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=False)"),
           R(CSA, "__init__", "nn.Linear(cfg.n_embd, cfg.n_embd)", "nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)")],
          kind="structural", seen_in="buggy/causal_no_bias", shows_as=[("parameter_count", "missing_bias")]),
)
