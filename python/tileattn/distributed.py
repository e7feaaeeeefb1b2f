"""Context parallelism: one sequence split across the ranks of a torch.distributed group.

    import torch.distributed as dist, tileattn.distributed as cp
    q_local, k_local, v_local = (cp.zigzag_shard(x, rank, world) for x in (q, k, v))
    out_local = cp.ring_attention(q_local, k_local, v_local, causal=True)   # trains too
    out = cp.zigzag_unshard(all_gathered_out_shards)

ring_attention keeps each rank's query shard and passes the K/V shards around the ring with
torch.distributed's point-to-point ops (NCCL on GPUs, gloo on CPUs), posted before the step
that uses them so the transfer overlaps the attention of the previous shard. Every step's
partial result (out, lse) is merged exactly by tileattn.flash_attn_combine. For causal
attention the sequence is split zigzag (rank r holds chunks r and 2W-1-r of 2W), so every rank
does the same work. The backward sends the K/V shards around once more, their dK and dV
travelling with them back to their owners; each block's gradients come from
tileattn.attention_backward with the merged out and LSE.

ulysses_attention is the all-to-all alternative: heads are redistributed so each rank runs the
whole sequence for H / W heads (contiguous shards, heads divisible by the world size).
"""

import torch
import torch.distributed as dist

from . import _api, _backward
from ._arrays import argument_error
from ._varlen import flash_attn_combine


def zigzag_shard(x, rank, world, dim=1):
    """Rank `rank`'s part of x split zigzag along dim into 2 * world chunks: chunks rank and
    2 * world - 1 - rank, concatenated. The length must divide by 2 * world."""
    if x.shape[dim] % (2 * world):
        raise argument_error(ValueError, "x", f"length {x.shape[dim]} along dim {dim} does not divide by "
                             f"2 * world = {2 * world}")
    chunks = x.chunk(2 * world, dim=dim)
    return torch.cat([chunks[rank], chunks[2 * world - 1 - rank]], dim=dim)


def zigzag_unshard(shards, dim=1):
    """The inverse of zigzag_shard: the full tensor from every rank's shard, in rank order."""
    world = len(shards)
    halves = [s.chunk(2, dim=dim) for s in shards]
    return torch.cat([halves[r][0] for r in range(world)] + [halves[r][1] for r in reversed(range(world))], dim=dim)


def _chunk_ids(rank, world, causal):
    """Global chunk indices of a rank's two halves (zigzag), or None for the whole shard."""
    return (rank, 2 * world - 1 - rank) if causal else None


def _blocks(q_ids, kv_ids):
    """(q half, kv half, causal) products of a step: a query chunk attends to the key chunks
    before it in full, to its own causally, and skips those after it."""
    if q_ids is None:
        return [(None, None, False)]
    out = []
    for i, qc in enumerate(q_ids):
        for j, kc in enumerate(kv_ids):
            if kc < qc:
                out.append((i, j, False))
            elif kc == qc:
                out.append((i, j, True))
    return out


def _half(x, i):
    return x if i is None else x.chunk(2, dim=1)[i]


def _exchange(group, tensors, rank, world):
    """Posts send of `tensors` to the next rank and receive of the same shapes from the previous
    one; returns (requests, received, sent): the sent tensors stay referenced until the waits."""
    sent = [t.contiguous() for t in tensors]
    recv = [torch.empty(t.shape, dtype=t.dtype, device=t.device) for t in sent]
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    ops = [dist.P2POp(dist.isend, t, dist.get_global_rank(group, nxt) if group else nxt, group) for t in sent]
    ops += [dist.P2POp(dist.irecv, r, dist.get_global_rank(group, prv) if group else prv, group) for r in recv]
    return dist.batch_isend_irecv(ops), recv, sent


def _ring_forward(q, k, v, causal, scale, group):
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    q_ids = _chunk_ids(rank, world, causal)
    halves = [[] for _ in range(1 if q_ids is None else 2)]  # per query half: (out, lse) partials
    kv = (k, v)
    for step in range(world):
        pending = _exchange(group, kv, rank, world) if step + 1 < world else None
        src = (rank - step) % world
        for i, j, block_causal in _blocks(q_ids, _chunk_ids(src, world, causal)):
            o, l = tileattn_attention(_half(q, i), _half(kv[0], j), _half(kv[1], j), block_causal, scale)
            halves[0 if i is None else i].append((o.float(), l))
        if pending is not None:
            for request in pending[0]:
                request.wait()
            kv = tuple(pending[1])
    outs, lses = [], []
    for parts in halves:
        out, lse = flash_attn_combine(torch.stack([o for o, _ in parts]),
                                      torch.stack([l.transpose(1, 2) for _, l in parts]))
        outs.append(out.to(q.dtype))
        lses.append(lse.transpose(1, 2))  # [B, H, L] storage
    return torch.cat(outs, dim=1), torch.cat(lses, dim=2).contiguous()


def tileattn_attention(q, k, v, causal, scale):
    return _api.attention(q, k, v, causal=causal, scale=scale, return_lse=True)


def _ring_backward(dout, q, k, v, out, lse, causal, scale, group):
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    q_ids = _chunk_ids(rank, world, causal)
    dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    kv = (k, v)
    dkv = (torch.zeros(k.shape, dtype=torch.float32, device=k.device),
           torch.zeros(v.shape, dtype=torch.float32, device=v.device))
    lse_half = lambda i: lse if i is None else lse.chunk(2, dim=2)[i]
    for step in range(world):
        pending_kv = _exchange(group, kv, rank, world) if step + 1 < world else None
        src = (rank - step) % world
        dk_step, dv_step = torch.zeros_like(dkv[0]), torch.zeros_like(dkv[1])
        for i, j, block_causal in _blocks(q_ids, _chunk_ids(src, world, causal)):
            g = _backward.attention_backward(_half(dout, i), _half(q, i), _half(kv[0], j), _half(kv[1], j),
                                             _half(out, i), lse_half(i).contiguous(), causal=block_causal,
                                             scale=scale)
            _half(dq, i).add_(g[0])
            _half(dk_step, j).add_(g[1])
            _half(dv_step, j).add_(g[2])
        if step > 0:  # this shard's gradients so far, from the previous rank
            for request in pending_dkv[0]:
                request.wait()
            dkv = tuple(pending_dkv[1])
        dkv = (dkv[0] + dk_step, dkv[1] + dv_step)
        pending_dkv = _exchange(group, dkv, rank, world)  # on to the next holder (last: home)
        if pending_kv is not None:
            for request in pending_kv[0]:
                request.wait()
            kv = tuple(pending_kv[1])
    for request in pending_dkv[0]:
        request.wait()
    dk, dv = pending_dkv[1]
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, scale, group):
        with torch.no_grad():
            out, lse = _ring_forward(q, k, v, causal, scale, group)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal, ctx.scale, ctx.group = causal, scale, group
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        with torch.no_grad():
            dq, dk, dv = _ring_backward(dout.contiguous(), q, k, v, out, lse, ctx.causal, ctx.scale, ctx.group)
        return dq, dk, dv, None, None, None


def ring_attention(q, k, v, *, causal=False, scale=None, group=None):
    """Attention of this rank's query shard against the whole sequence, whose K/V shards the
    ranks of `group` (default: the world) pass around a ring.

    Args:
        q, k, v: this rank's shards, torch tensors ``[batch, seqlen / world, heads, head_dim]``
            (every rank the same shape; GQA as in :func:`tileattn.attention`). With
            ``causal=True`` they must be zigzag shards (:func:`zigzag_shard`); otherwise any
            split works (rank order does not matter without a mask).
        causal: causal over the whole sequence (the shards' lengths equal, so top-left and
            bottom-right alignment agree).
        scale: as in :func:`tileattn.attention` (``None``: ``1 / sqrt(head_dim)``).

    Returns:
        This rank's rows of the output, ``[batch, seqlen / world, heads, head_dim]`` in q's dtype.
        Differentiable: the backward runs the ring again (dK and dV return to their owners).
    """
    if not isinstance(q, torch.Tensor):
        raise argument_error(TypeError, "q", f"ring_attention takes torch tensors, got {type(q).__name__}")
    if q.shape[1] != k.shape[1]:
        raise argument_error(ValueError, "k", f"shard length {k.shape[1]} differs from q's {q.shape[1]}")
    if causal and q.shape[1] % 2:
        raise argument_error(ValueError, "q", f"shard length {q.shape[1]} is odd; a zigzag shard has two halves")
    if dist.get_world_size(group) == 1:
        return _api.attention(q, k, v, causal=causal, scale=scale)
    return _RingAttention.apply(q, k, v, bool(causal), scale, group)


class _AllToAll(torch.autograd.Function):
    """dist.all_to_all_single over dim 0 in equal chunks; its gradient is the same exchange."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        dist.all_to_all_single(out, x.contiguous(), group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        out = torch.empty(grad.shape, dtype=grad.dtype, device=grad.device)  # contiguous, whatever grad is
        dist.all_to_all_single(out, grad.contiguous(), group=ctx.group)
        return out, None


def _heads_to_sequence(x, world, group):
    """[B, L/W, H, D] on each rank -> [B, L, H/W, D]: rank r gets heads r*H/W.. of every position."""
    b, ls, h, d = x.shape
    send = x.reshape(b, ls, world, h // world, d).permute(2, 1, 0, 3, 4).contiguous()  # [W, Ls, B, H/W, D]
    recv = _AllToAll.apply(send, group)  # [W (source = sequence chunk), Ls, B, H/W, D]
    return recv.permute(2, 0, 1, 3, 4).reshape(b, world * ls, h // world, d)


def _sequence_to_heads(x, world, group):
    """The inverse: [B, L, H/W, D] -> [B, L/W, H, D]."""
    b, l, hw, d = x.shape
    send = x.reshape(b, world, l // world, hw, d).permute(1, 2, 0, 3, 4).contiguous()  # [W, Ls, B, H/W, D]
    recv = _AllToAll.apply(send, group)  # [W (source = head group), Ls, B, H/W, D]
    return recv.permute(2, 1, 0, 3, 4).reshape(b, l // world, world * hw, d)


def ulysses_attention(q, k, v, *, causal=False, scale=None, group=None):
    """Context parallelism by all-to-all over heads (DeepSpeed-Ulysses): contiguous sequence
    shards ``[batch, seqlen / world, heads, head_dim]`` in, this rank's rows of the output out.
    Query and KV head counts must divide by the world size. Differentiable."""
    world = dist.get_world_size(group)
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.shape[2] % world:
            raise argument_error(ValueError, name, f"{x.shape[2]} heads do not divide by the world size {world}")
    if world == 1:
        return _api.attention(q, k, v, causal=causal, scale=scale)
    qs, ks, vs = (_heads_to_sequence(x, world, group) for x in (q, k, v))
    out = _api.attention(qs, ks, vs, causal=causal, scale=scale)
    return _sequence_to_heads(out, world, group)


__all__ = ["ring_attention", "ulysses_attention", "zigzag_shard", "zigzag_unshard"]
