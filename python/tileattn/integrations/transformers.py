"""tileattn as an attention implementation of Hugging Face transformers.

    import tileattn.integrations.transformers as tileattn_hf
    tileattn_hf.register()                     # once; needs transformers >= 4.48
    model = AutoModelForCausalLM.from_pretrained(name, attn_implementation="tileattn")

The model's attention layers then call :func:`tileattn.attention` (forward and backward, so the
model trains), with its causal flag, scaling, softcap and sliding window. Batches without
padding only: a padded batch raises NotImplementedError (pack it and call
:func:`tileattn.flash_attn_varlen_func` instead).
"""

import tileattn


def attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None,
                      softcap=None, sliding_window=None, **kwargs):
    """transformers' attention-function interface: query ``[batch, heads, seqlen_q, head_dim]``,
    key and value ``[batch, kv_heads, seqlen_k, head_dim]``; returns ``(out [batch, seqlen_q,
    heads, head_dim], None)``."""
    if attention_mask is not None:
        raise NotImplementedError(
            "tileattn: this batch has padding (an attention mask); tileattn takes unpadded batches here. "
            "Pack the sequences and call tileattn.flash_attn_varlen_func, or drop the padding"
        )
    if dropout:
        raise NotImplementedError(f"tileattn: dropout={dropout!r}; tileattn has no attention dropout")
    if kwargs.get("output_attentions"):
        raise NotImplementedError("tileattn: output_attentions=True; tileattn never forms the attention matrix")
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    window = (-1, -1)
    if sliding_window is not None:  # the last `sliding_window` keys, the query's own included
        window = (sliding_window - 1, -1 if not causal else 0)
    q, k, v = (x.transpose(1, 2) for x in (query, key, value))
    out = tileattn.attention(q, k, v, causal=bool(causal), scale=scaling, window=window, softcap=softcap or 0.0)
    return out, None


def register(name="tileattn"):
    """Makes ``attn_implementation=name`` available to every transformers model."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask

    AttentionInterface.register(name, attention_forward)
    # Like flash-attn: no mask for an unpadded batch (the causal flag does the masking).
    AttentionMaskInterface.register(name, flash_attention_mask)
