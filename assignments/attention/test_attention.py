"""Tests públicos del ejercicio de atención.

Ejecútalos desde esta carpeta con:

    pytest test_attention.py

Son una muestra pequeña: el corrector oculto prueba muchas más formas y propiedades.
"""
import sys
from pathlib import Path

# Permite ejecutar los tests también desde la raíz del repositorio:
# el attention.py de esta carpeta tiene prioridad.
sys.path.insert(0, str(Path(__file__).resolve().parent))

import pytest  # noqa: E402
import torch  # noqa: E402

from attention import Cfg, CausalSelfAttention, MultiHeadAttention, SelfAttention  # noqa: E402

ATOL = 1e-5


@pytest.fixture(autouse=True)
def semilla_fija():
    torch.manual_seed(0)


def mascara_causal(T):
    return torch.tril(torch.ones(T, T, dtype=torch.bool))


# ---------------------------------------------------------------- SelfAttention


def test_self_attention_formas():
    attn = SelfAttention(d_model=12, d_k=8)
    x = torch.randn(3, 5, 12)
    salida, pesos = attn(x)
    assert salida.shape == (3, 5, 8), f"la salida debe tener forma (B, T, d_k) = (3, 5, 8), no {tuple(salida.shape)}"
    assert pesos.shape == (3, 5, 5), f"los pesos deben tener forma (B, T, T) = (3, 5, 5), no {tuple(pesos.shape)}"


def test_self_attention_d_k_por_defecto():
    attn = SelfAttention(d_model=10)
    salida, _ = attn(torch.randn(2, 4, 10))
    assert salida.shape == (2, 4, 10), "sin d_k, la salida debe tener dimensión d_model"


def test_self_attention_filas_suman_uno():
    attn = SelfAttention(d_model=16)
    _, pesos = attn(torch.randn(2, 7, 16))
    suma = pesos.sum(dim=-1)
    assert torch.allclose(suma, torch.ones_like(suma), atol=ATOL), (
        "cada fila de pesos debe sumar 1: ¿aplicaste softmax con dim=-1?"
    )


def test_self_attention_mascara_pone_ceros():
    attn = SelfAttention(d_model=16)
    T = 6
    mascara = mascara_causal(T).long()  # 1 = permitido, 0 = prohibido
    _, pesos = attn(torch.randn(2, T, 16), mask=mascara)
    futuro = pesos[:, ~mascara_causal(T)]
    assert torch.all(futuro == 0), "donde mask == 0 el peso de atención debe ser exactamente 0"
    suma = pesos.sum(dim=-1)
    assert torch.allclose(suma, torch.ones_like(suma), atol=ATOL), "con máscara, las filas también deben sumar 1"


# ---------------------------------------------------------------- MultiHeadAttention


def test_multi_head_formas_atencion_cruzada():
    mha = MultiHeadAttention(d_model=16, num_heads=4, dropout=0.0)
    consulta = torch.randn(2, 3, 16)
    memoria = torch.randn(2, 7, 16)
    salida, pesos = mha(consulta, memoria, memoria)
    assert salida.shape == (2, 3, 16), f"la salida debe tener forma (B, Tq, d_model) = (2, 3, 16), no {tuple(salida.shape)}"
    assert pesos.shape == (2, 4, 3, 7), f"los pesos deben tener forma (B, h, Tq, Tk) = (2, 4, 3, 7), no {tuple(pesos.shape)}"


def test_multi_head_split_heads():
    mha = MultiHeadAttention(d_model=12, num_heads=3)
    x = torch.randn(2, 5, 12)
    cabezas = mha.split_heads(x, 2)
    assert cabezas.shape == (2, 3, 5, 4), f"split_heads debe devolver (B, h, T, d_k) = (2, 3, 5, 4), no {tuple(cabezas.shape)}"
    assert torch.equal(cabezas[:, 1], x[:, :, 4:8]), "la cabeza i debe ser la rebanada [i*d_k:(i+1)*d_k] de la última dimensión"


@pytest.mark.parametrize("d_model,num_heads", [(16, 4), (24, 3), (8, 8)])
def test_multi_head_numero_de_parametros(d_model, num_heads):
    mha = MultiHeadAttention(d_model, num_heads)
    n = sum(p.numel() for p in mha.parameters())
    assert n == 4 * d_model**2, f"debe haber 4·d_model² = {4 * d_model**2} parámetros (sin sesgos), no {n}"


def test_multi_head_error_si_no_es_divisible():
    with pytest.raises((ValueError, AssertionError)):
        MultiHeadAttention(d_model=10, num_heads=3)


def test_multi_head_filas_suman_uno_y_mascara():
    mha = MultiHeadAttention(d_model=16, num_heads=4).eval()  # eval: sin dropout
    T = 5
    x = torch.randn(2, T, 16)
    mascara = mascara_causal(T).unsqueeze(0).expand(2, T, T)  # (B, Tq, Tk)
    _, pesos = mha(x, x, x, mask=mascara)
    suma = pesos.sum(dim=-1)
    assert torch.allclose(suma, torch.ones_like(suma), atol=ATOL), "cada fila de pesos debe sumar 1 en modo eval"
    assert torch.all(pesos[..., ~mascara_causal(T)] == 0), (
        "con una máscara (B, Tq, Tk), el peso debe ser 0 donde mask == 0 en todas las cabezas"
    )


# ---------------------------------------------------------------- CausalSelfAttention


@pytest.mark.parametrize("T", [1, 10, 16])
def test_causal_formas(T):
    attn = CausalSelfAttention(Cfg()).eval()
    y = attn(torch.randn(2, T, 32))
    assert y.shape == (2, T, 32), f"la salida debe tener forma (B, T, C) = (2, {T}, 32), no {tuple(y.shape)}"


def test_causal_buffer_mascara():
    cfg = Cfg()
    attn = CausalSelfAttention(cfg)
    assert hasattr(attn, "mask"), "falta registrar el buffer 'mask'"
    assert "mask" in dict(attn.named_buffers()), "'mask' debe registrarse con register_buffer"
    assert attn.mask.dtype == torch.bool, "la máscara debe ser booleana"
    assert attn.mask.shape == (1, 1, cfg.block_size, cfg.block_size), "la máscara debe tener forma (1, 1, block_size, block_size)"
    assert torch.equal(attn.mask[0, 0], mascara_causal(cfg.block_size)), "la máscara debe ser triangular inferior"
    assert "mask" not in attn.state_dict(), "la máscara no debe guardarse en el state_dict: usa persistent=False"


def test_causal_no_se_filtra_el_futuro():
    """¿Se filtra el futuro? Cambiar el último token no debe mover las salidas anteriores."""
    attn = CausalSelfAttention(Cfg()).eval()
    x = torch.randn(1, 10, 32)  # T = 10 < block_size = 16
    x2 = x.clone()
    x2[:, -1] = torch.randn(32)  # perturbamos solo la última posición
    y, y2 = attn(x), attn(x2)
    assert torch.allclose(y[:, :-1], y2[:, :-1], atol=1e-6), (
        "¡fuga de información! cambiar el último token modificó salidas anteriores: revisa la máscara causal"
    )
    assert not torch.allclose(y[:, -1], y2[:, -1]), "la salida de la última posición debería cambiar al cambiar su entrada"


def test_causal_fusionada_igual_a_explicita():
    attn = CausalSelfAttention(Cfg()).eval()
    x = torch.randn(3, 11, 32)
    explicita = attn(x)
    fusionada = attn(x, fused=True)
    assert fusionada.shape == explicita.shape, "las dos rutas deben devolver la misma forma"
    assert torch.allclose(fusionada, explicita, atol=ATOL), (
        "la ruta fusionada (scaled_dot_product_attention) debe dar lo mismo que la explícita"
    )
