"""Ejercicio: auto-atención, atención multi-cabeza y auto-atención causal.

Completa cada bloque marcado con ``TODO`` y borra el ``raise NotImplementedError``
correspondiente. Reglas del contrato (el corrector automático depende de ellas):

* No cambies los nombres de las clases, de los atributos (``W_Q``, ``qkv``, ``mask``...)
  ni las firmas de los métodos.
* Notación: B = tamaño del batch, T = largo de la secuencia, C = d_model = n_embd,
  h = número de cabezas, d_k = dimensión de cada cabeza.
* No crees tensores en un dispositivo fijo dentro de ``forward`` (nada de ``.cuda()`` ni
  ``device="cpu"``): usa ``x.device`` o buffers registrados, que viajan con ``.to(device)``.
* Puedes probar tu trabajo con ``pytest test_attention.py`` (ver ENUNCIADO.md).
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Cfg:
    """Configuración mínima para ``CausalSelfAttention`` (la misma de las lecciones)."""

    n_embd: int = 32
    n_head: int = 4
    block_size: int = 16
    dropout: float = 0.0


class SelfAttention(nn.Module):
    """Auto-atención de una sola cabeza: Q, K y V salen de la misma entrada ``x``.

    SelfAttention(X) = softmax( (X W_Q)(X W_K)^T / sqrt(d_k) ) (X W_V)
    """

    def __init__(self, d_model, d_k=None):
        super().__init__()
        d_k = d_k or d_model
        self.d_k = d_k
        # TODO: crea las proyecciones lineales sin sesgo (bias=False), de d_model a d_k,
        #       con estos nombres exactos: self.W_Q, self.W_K y self.W_V.
        #       En total son 3 · d_model · d_k parámetros.
        raise NotImplementedError("Falta implementar SelfAttention.__init__")

    def forward(self, x, mask=None):
        """Aplica auto-atención de producto punto escalado.

        Args:
            x: tensor de forma (B, T, d_model).
            mask: opcional, de forma (B, T, T), (1, T, T) o (T, T), de tipo bool, long o
                float con valores 0 y 1. Donde ``mask == 0`` la posición está prohibida: su
                peso de atención debe ser exactamente 0.

        Returns:
            Una tupla ``(output, weights)``:
                output: tensor de forma (B, T, d_k).
                weights: tensor de forma (B, T, T); cada fila suma 1.
        """
        # TODO paso 1: calcula Q, K y V proyectando x con W_Q, W_K y W_V.  -> (B, T, d_k)
        # TODO paso 2: puntajes = Q @ K^T / sqrt(d_k).  -> (B, T, T)
        #              Ojo: transpone solo las dos últimas dimensiones de K.
        # TODO paso 3: si hay máscara, pon -inf donde mask == 0 (masked_fill).
        # TODO paso 4: softmax sobre la última dimensión (dim=-1) -> pesos.
        # TODO paso 5: salida = pesos @ V.  -> (B, T, d_k)
        # TODO paso 6: devuelve (salida, pesos).
        raise NotImplementedError("Falta implementar SelfAttention.forward")


class MultiHeadAttention(nn.Module):
    """Atención multi-cabeza: h atenciones en paralelo sobre subespacios de tamaño d_k.

    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W_O,
    head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V),   d_k = d_model / h.
    """

    def __init__(self, d_model, num_heads, dropout=0.1):
        super().__init__()
        # TODO: si d_model no es divisible por num_heads, lanza un ValueError con un
        #       mensaje claro (antes de crear las capas). Sin esta comprobación d_k
        #       quedaría truncado y las formas no cuadrarían.

        self.d_model = d_model
        self.num_heads = num_heads
        self.d_k = d_model // num_heads

        # TODO: crea las capas, con estos nombres exactos:
        #   - self.W_Q, self.W_K, self.W_V: proyecciones de todas las cabezas juntas,
        #     nn.Linear de d_model a d_model sin sesgo (bias=False);
        #   - self.W_O: proyección de salida que mezcla las cabezas concatenadas, igual;
        #   - self.dropout = nn.Dropout(dropout), para los pesos de atención.
        #   En total son 4 · d_model² parámetros, sin importar el número de cabezas.
        raise NotImplementedError("Falta implementar MultiHeadAttention.__init__")

    def split_heads(self, x, batch_size):
        """Separa la última dimensión en cabezas.

        Args:
            x: tensor de forma (B, T, d_model).
            batch_size: B.

        Returns:
            Tensor de forma (B, h, T, d_k): las cabezas pasan a ser una dimensión de batch.
        """
        # TODO paso 1: reorganiza x a (B, T, h, d_k) con view (usa -1 para T).
        # TODO paso 2: intercambia las dimensiones 1 y 2 -> (B, h, T, d_k).
        raise NotImplementedError("Falta implementar MultiHeadAttention.split_heads")

    def forward(self, query, key, value, mask=None):
        """Atención multi-cabeza (sirve para auto-atención y para atención cruzada).

        Args:
            query: tensor de forma (B, Tq, d_model).
            key: tensor de forma (B, Tk, d_model).
            value: tensor de forma (B, Tk, d_model).
            mask: opcional, de tipo bool, long o float con valores 0 y 1, de forma (Tq, Tk),
                (B, Tq, Tk) o (1, Tq, Tk) (la misma para todas las cabezas: agrégale la
                dimensión de las cabezas con unsqueeze(1)), o (B, h, Tq, Tk), donde B y h
                pueden valer 1. Donde ``mask == 0`` la posición está prohibida: su peso de
                atención debe ser exactamente 0.

        Returns:
            Una tupla ``(output, weights)``:
                output: tensor de forma (B, Tq, d_model).
                weights: tensor de forma (B, h, Tq, Tk) (después del dropout).
        """
        # TODO paso 1: proyecta query, key y value con W_Q, W_K y W_V.
        # TODO paso 2: separa en cabezas con split_heads.  -> (B, h, T, d_k)
        # TODO paso 3: puntajes = Q @ K^T / sqrt(d_k).  -> (B, h, Tq, Tk)
        # TODO paso 4: si hay máscara de 3 dimensiones (B, Tq, Tk), agrégale la
        #              dimensión de las cabezas con unsqueeze(1); luego pon -inf donde
        #              mask == 0.
        # TODO paso 5: softmax sobre la última dimensión y después self.dropout.
        # TODO paso 6: contexto = pesos @ V.  -> (B, h, Tq, d_k)
        # TODO paso 7: junta las cabezas: transpose(1, 2), .contiguous() y
        #              view(B, -1, d_model).  -> (B, Tq, d_model)
        # TODO paso 8: aplica W_O y devuelve (salida, pesos).
        raise NotImplementedError("Falta implementar MultiHeadAttention.forward")


class CausalSelfAttention(nn.Module):
    """Auto-atención causal multi-cabeza (estilo GPT).

    La posición i solo puede mirar las posiciones j <= i: la máscara causal M vale 0
    donde j <= i y -inf donde j > i, y se suma a los puntajes antes del softmax.
    """

    def __init__(self, cfg):
        super().__init__()
        assert cfg.n_embd % cfg.n_head == 0
        self.n_head = cfg.n_head
        # TODO: crea las capas, con estos nombres exactos:
        #   - self.qkv: una sola capa que produce Q, K y V juntas, nn.Linear(C, 3C) con sesgo;
        #   - self.proj: proyección de salida, nn.Linear(C, C) con sesgo;
        #   - self.attn_drop y self.resid_drop: nn.Dropout(cfg.dropout).
        # TODO: registra la máscara causal como buffer llamado "mask".
        #   - Debe ser booleana y triangular inferior (torch.tril sobre torch.ones con
        #     dtype=torch.bool), de forma (1, 1, block_size, block_size).
        #   - Usa self.register_buffer("mask", ..., persistent=False): así la máscara
        #     viaja con el módulo al hacer .to(device), pero no es un parámetro
        #     entrenable ni se guarda en el state_dict.
        #   - El state_dict guarda solo los parámetros de qkv y proj: cualquier otro
        #     buffer que registres, también con persistent=False.
        raise NotImplementedError("Falta implementar CausalSelfAttention.__init__")

    def forward(self, x, fused=False):
        """Aplica auto-atención causal multi-cabeza.

        Args:
            x: tensor de forma (B, T, C), con T <= block_size.
            fused: si es True, usa F.scaled_dot_product_attention(..., is_causal=True)
                en lugar de la versión explícita. Ambas deben dar el mismo resultado.

        Returns:
            Tensor de forma (B, T, C).
        """
        # TODO paso 1: B, T, C = x.shape; tamaño de cabeza hs = C // n_head.
        # TODO paso 2: q, k, v = self.qkv(x).split(C, dim=2)  (en ese orden).
        # TODO paso 3: lleva q, k y v a (B, n_head, T, hs) con view + transpose(1, 2).
        # TODO paso 4 (fused=True): y = F.scaled_dot_product_attention(q, k, v,
        #              is_causal=True, dropout_p=...), con dropout_p = self.attn_drop.p
        #              solo en modo entrenamiento (self.training) y 0.0 en evaluación.
        # TODO paso 4 (fused=False), versión explícita:
        #   a) att = q @ k^T / sqrt(hs).  -> (B, n_head, T, T)
        #   b) recorta la máscara al largo real: self.mask[:, :, :T, :T], y pon -inf
        #      donde la máscara es False (el futuro).
        #   c) softmax en dim=-1 y luego self.attn_drop.
        #   d) y = att @ v.  -> (B, n_head, T, hs)
        # TODO paso 5: concatena las cabezas: transpose(1, 2), .contiguous(),
        #              view(B, T, C).
        # TODO paso 6: devuelve self.resid_drop(self.proj(y)).
        raise NotImplementedError("Falta implementar CausalSelfAttention.forward")
