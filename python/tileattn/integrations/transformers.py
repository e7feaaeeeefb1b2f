"""tileattn as an attention implementation of Hugging Face transformers.

    import tileattn.integrations.transformers as tileattn_hf
    tileattn_hf.register()                     # once; needs transformers >= 4.48
    model = AutoModelForCausalLM.from_pretrained(name, attn_implementation="tileattn")

The model's attention layers then call tileattn (forward and backward, so the model trains),
with its causal flag, scaling, softcap and sliding window. Unpadded batches go to
:func:`tileattn.attention`; a padded batch (the 2-D attention mask transformers passes with
flash-attention-style masking) is packed: its valid tokens become the sequences of
:func:`tileattn.flash_attn_varlen_func` and the output is scattered back, zeros at padding. That
covers training and prefill on padded batches and generation with transformers' cache (the
keys of every past step plus the new ones, left padding included). A batch that is already
packed (padding-free training: several sequences in one row) is attended per sequence, as
transformers' flash path does: from the ``cu_seq_lens_q`` / ``cu_seq_lens_k`` arguments when
the caller passes them (``DataCollatorWithFlattening(return_flash_attn_kwargs=True)``), else
from ``position_ids`` that restart at 0 where a sequence starts.
"""

import torch

import tileattn


def _unpad(x, mask):
    """x [B, L, H, D] and a [B, L] mask -> (rows [total, H, D], flat indices, cu_seqlens, longest)."""
    lens = mask.sum(dim=1, dtype=torch.int32)
    indices = torch.nonzero(mask.flatten(), as_tuple=False).flatten()
    cu = torch.nn.functional.pad(torch.cumsum(lens, dim=0, dtype=torch.int32), (1, 0))
    rows = x.reshape(-1, *x.shape[2:]).index_select(0, indices)
    return rows, indices, cu, int(lens.max()) if lens.numel() else 0


def _longest(cu):
    return int((cu[1:] - cu[:-1]).max()) if cu.numel() > 1 else 0


def _packed_sequences(q, k, kwargs):
    """(cu_q, cu_k, max_q, max_k) of a packed batch (one row holding several sequences), or None."""
    cu_q, cu_k = kwargs.get("cu_seq_lens_q"), kwargs.get("cu_seq_lens_k")
    if cu_q is not None and cu_k is not None:
        max_q, max_k = kwargs.get("max_length_q"), kwargs.get("max_length_k")
        return (cu_q.to(torch.int32), cu_k.to(torch.int32), _longest(cu_q) if max_q is None else int(max_q),
                _longest(cu_k) if max_k is None else int(max_k))
    pos = kwargs.get("position_ids")
    if pos is None or q.shape[0] != 1 or q.shape[1] == 1 or q.shape[1] != k.shape[1] or pos.numel() != q.shape[1]:
        return None
    starts = torch.nonzero(pos.reshape(-1) == 0).flatten().tolist()  # one read of the device
    if starts in ([], [0]):  # one sequence: positions never restart at 0
        return None
    if starts[0] != 0:
        raise NotImplementedError("tileattn: position_ids restart but not at 0; cannot tell the packed sequences")
    ends = starts[1:] + [q.shape[1]]
    cu = torch.tensor(starts + ends[-1:], dtype=torch.int32, device=q.device)
    longest = max(e - s for s, e in zip(starts, ends))
    return cu, cu, longest, longest


def attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None,
                      softcap=None, sliding_window=None, **kwargs):
    """transformers' attention-function interface: query ``[batch, heads, seqlen_q, head_dim]``,
    key and value ``[batch, kv_heads, seqlen_k, head_dim]``, attention_mask None or the 2-D
    ``[batch, seqlen_k]`` padding mask; returns ``(out [batch, seqlen_q, heads, head_dim], None)``."""
    if dropout:
        raise NotImplementedError(f"tileattn: dropout={dropout!r}; tileattn has no attention dropout")
    if kwargs.get("output_attentions"):
        raise NotImplementedError("tileattn: output_attentions=True; tileattn never forms the attention matrix")
    causal = bool(is_causal if is_causal is not None else getattr(module, "is_causal", True))
    window = (-1, -1)
    if sliding_window is not None:  # the last `sliding_window` keys, the query's own included
        window = (sliding_window - 1, 0 if causal else -1)
    options = dict(causal=causal, softmax_scale=scaling, window_size=window, softcap=softcap or 0.0)
    q, k, v = (x.transpose(1, 2) for x in (query, key, value))
    if attention_mask is None:
        packed = _packed_sequences(q, k, kwargs)
        if packed is None:
            return tileattn.flash_attn_func(q, k, v, **options), None
        rows = tileattn.flash_attn_varlen_func(*(x.reshape(-1, *x.shape[2:]) for x in (q, k, v)), *packed, **options)
        return rows.reshape(q.shape[0], q.shape[1], *rows.shape[1:]), None
    if attention_mask.dim() != 2:
        raise NotImplementedError(
            f"tileattn: a {attention_mask.dim()}-D attention mask; tileattn takes transformers' 2-D padding "
            "mask (register() installs the mask function that makes it)")
    mask_k = attention_mask[:, -k.shape[1]:].bool()
    mask_q = mask_k[:, -q.shape[1]:]  # the queries are the last positions
    q_rows, q_index, cu_q, max_q = _unpad(q, mask_q)
    k_rows, _, cu_k, max_k = _unpad(k, mask_k)
    v_rows = v.reshape(-1, *v.shape[2:]).index_select(0, torch.nonzero(mask_k.flatten()).flatten())
    rows = tileattn.flash_attn_varlen_func(q_rows, k_rows, v_rows, cu_q, cu_k, max_q, max_k, **options)
    out = rows.new_zeros(q.shape[0] * q.shape[1], *rows.shape[1:]).index_copy(0, q_index, rows)
    return out.reshape(q.shape[0], q.shape[1], *rows.shape[1:]), None


def register(name="tileattn"):
    """Makes ``attn_implementation=name`` available to every transformers model."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask

    AttentionInterface.register(name, attention_forward)
    # Like flash-attn: no mask for an unpadded batch, the 2-D padding mask otherwise.
    AttentionMaskInterface.register(name, flash_attention_mask)
