"""A tiny transformers model (Llama: GQA, rotary, causal) trains with tileattn as its attention:
over 20 optimizer steps its losses follow the float64 run as closely as the sdpa path's do
(|loss - loss_fp64| <= 2 |loss_sdpa - loss_fp64| + atol at every step). CPU; skipped without
torch or transformers."""

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import tileattn.integrations.transformers as tileattn_hf  # noqa: E402

tileattn_hf.register()


def train(attn_implementation, dtype, steps=20):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    config._attn_implementation = attn_implementation
    model = transformers.LlamaForCausalLM(config).to(dtype)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    # A fixed batch whose second half repeats its first: the model learns to copy (the loss falls).
    half = torch.randint(0, 128, (4, 24), generator=torch.Generator().manual_seed(1))
    tokens = torch.cat([half, half], dim=1)
    losses = []
    for _ in range(steps):
        loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("dtype, atol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)], ids=["fp32", "bf16"])
def test_training_losses_follow_float64_as_sdpa_does(dtype, atol):
    truth = train("sdpa", torch.float64)
    sdpa, ours = train("sdpa", dtype), train("tileattn", dtype)
    assert truth[-1] < truth[0] - 0.5  # it learns (the comparison is not of flat curves)
    for step, (t, s, o) in enumerate(zip(truth, sdpa, ours)):
        assert abs(o - t) <= 2 * abs(s - t) + atol, (step, o, s, t)
    print(f"{dtype}: final loss fp64 {truth[-1]:.5f} sdpa {sdpa[-1]:.5f} tileattn {ours[-1]:.5f}")


def test_padding_is_refused_clearly():
    config = transformers.LlamaConfig(vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=1)
    config._attn_implementation = "tileattn"
    model = transformers.LlamaForCausalLM(config)
    tokens = torch.randint(0, 32, (2, 10))
    mask = torch.ones(2, 10, dtype=torch.long)
    mask[1, 7:] = 0
    with pytest.raises(NotImplementedError, match="padding"):
        model(input_ids=tokens, attention_mask=mask)
