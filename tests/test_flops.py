"""Model FLOPs as Megatron-LM counts them (issue 50, part 4: `moplace.core.flops`), by hand,
and the transformer shapes the PyTorch front end records for them."""

from __future__ import annotations

import pytest

from moplace.core.flops import CONVENTION, TransformerShape, megatron_flops

MIXTRAL = TransformerShape(hidden=4096, layers=32, heads=32, kv_heads=8, head_dim=128,
                           ffn=14336, vocab=32000, gated=True, experts=8, top_k=2)


def test_mixtral_by_hand():
    """Megatron-LM's formula at f2e5db4 for Mixtral 8x7B at 4,096 tokens: 12 s L h^2 (1 +
    8/32 + 4096/4096 + 14336/4096 x 2 x 3/2 + 32000 / (2 x 32 x 4096)) per sequence."""
    flops, how = megatron_flops(MIXTRAL, 256, 4096)
    per_seq = 12 * 4096 * 32 * 4096**2 * (1 + 0.25 + 1 + 3.5 * 2 * 1.5 + 32000 / (2 * 32 * 4096))
    assert flops == pytest.approx(256 * per_seq, rel=1e-12)
    assert how == CONVENTION and "no causal halving" in how
    assert flops / 256 / 4096 == pytest.approx(82.93e9, rel=1e-3)  # FLOPs a token


def test_dense_ungated_and_query_projection():
    gpt = TransformerShape(hidden=768, layers=12, heads=12, kv_heads=12, head_dim=64, ffn=3072,
                           vocab=50257, gated=False)
    flops, _ = megatron_flops(gpt, 1, 1024)
    assert flops == pytest.approx(12 * 1024 * 12 * 768**2 * (2 + 1024 / 768 + 4
                                                              + 50257 / (2 * 12 * 768)))
    wide = TransformerShape(hidden=2048, layers=48, heads=32, kv_heads=4, head_dim=128,
                            ffn=768, vocab=151936, gated=True, experts=128, top_k=8)
    f, _ = megatron_flops(wide, 1, 4096)  # queries project to 4,096 > hidden: ratio 2
    assert f == pytest.approx(12 * 4096 * 48 * 2048**2 * (
        (1 + 4 / 32 + 2) * 2 + 768 / 2048 * 8 * 1.5 + 151936 / (2 * 48 * 2048)))


@pytest.mark.parametrize("change", [dict(shared_ffn=2048), dict(dense_layers=3),
                                    dict(attention="mla")])
def test_what_the_formula_does_not_cover_is_refused(change):
    shape = TransformerShape(**{**MIXTRAL.as_dict(), **change})
    flops, why = megatron_flops(shape, 1, 4096)
    assert flops is None and "f2e5db4" in why
    assert megatron_flops(None, 1, 4096)[0] is None


def test_shapes_of_bundled_configs():
    pytest.importorskip("transformers")
    from moplace.torch.hf import hf_config
    from moplace.torch.modelshape import transformer_shape

    def shape(name):
        c = hf_config(name)
        return transformer_shape(c[0] if isinstance(c, tuple) else c)

    assert shape("mixtral-8x7b") == MIXTRAL.as_dict()
    assert shape("gpt2")["gated"] is False and shape("gpt2")["ffn"] == 3072
    v3 = shape("deepseek-v3")
    assert v3["attention"] == "mla" and v3["dense_layers"] == 3 and v3["shared_ffn"] == 2048
    assert shape("qwen3-30b-a3b")["ffn"] == 768 and shape("qwen3-30b-a3b")["top_k"] == 8
