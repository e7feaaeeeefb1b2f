"""A transformers Llama on tileattn beside its sdpa path, on one GPU: prefill, decode, agreement.

A random-weight Llama (hidden 2048, 8 layers, 32 query / 8 KV heads of 64, bf16) built from
`transformers.LlamaConfig` (no download), once with attn_implementation="tileattn" and once with
"sdpa", the same weights:
  prefill   the model's forward over B x L tokens (no cache), by the one timer (timer.py)
  step      one decode step by the one timer: the model's forward over one new token per row
            against a DynamicCache of P prompt tokens (cropped back to P after each call, so
            every call sees the same cache); plain and CUDA-graph-free (the cache grows by a
            concatenation each step, as in generate())
  decode    ms per generated token: (generate(N + 1 tokens) - generate(1 token)) / N, greedy,
            after a P-token prompt, median of a few runs (torch.cuda.synchronize around each);
            host-bound and noisy between runs, the step row is the figure to compare
  agree     on a padded batch (right and left padding): each bf16 path's largest logit error
            against the same model in fp32 (sdpa), tileattn's beside sdpa's and eager's (the 2x
            rule), how many greedy tokens tileattn and eager each share with sdpa, and how many
            next-token choices under sdpa's tokens as the prefix (no cascade after a flip)
    python bench/gpu/transformers_bench.py --out transformers.json
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import time

import torch
import transformers

import tileattn.integrations.transformers as tileattn_hf
import timer as timers


def model(impl, args):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632,
                                      num_hidden_layers=args.layers, num_attention_heads=32, num_key_value_heads=8,
                                      max_position_embeddings=8192, pad_token_id=0)
    config._attn_implementation = impl
    return transformers.LlamaForCausalLM(config).to(device="cuda", dtype=torch.bfloat16).eval()


def generate_ms(m, prompt, mask, new_tokens):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = m.generate(input_ids=prompt, attention_mask=mask, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                     do_sample=False, pad_token_id=0)
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3, out


def decode_step_ms(m, ids, timer):
    """The timer's median of one decode step after the prompt ids (see the module's note)."""
    cache = transformers.DynamicCache(config=m.config)
    logits = m(input_ids=ids, past_key_values=cache, use_cache=True).logits
    token = logits[:, -1:].argmax(-1)
    prompt = ids.shape[1]
    position = torch.tensor([prompt], device=ids.device)
    mask = torch.ones(ids.shape[0], prompt + 1, dtype=ids.dtype, device=ids.device)

    def step():
        m(input_ids=token, past_key_values=cache, attention_mask=mask, cache_position=position, use_cache=True)
        cache.crop(-1)  # the new token off again (a negative count removes that many)

    return timer.time(step)["ms"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--prefill", default="4x2048,1x8192")
    ap.add_argument("--decode", default="1x1024,8x1024,32x512")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    tileattn_hf.register()
    timer = timers.Timer(20, 3)
    models = {impl: model(impl, args) for impl in ("tileattn", "sdpa")}
    models["tileattn"].load_state_dict(models["sdpa"].state_dict())
    rows = []
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for shape in args.prefill.split(","):
            B, L = (int(x) for x in shape.split("x"))
            ids = torch.randint(1, 32000, (B, L), generator=g).cuda()
            row = dict(kind="prefill", B=B, L=L)
            for impl, m in models.items():
                row[impl + "_ms"] = timer.time(lambda: m(input_ids=ids).logits)["ms"]
            rows.append(row)
            print(f"prefill {B}x{L}: tileattn {row['tileattn_ms']:.2f} ms  sdpa {row['sdpa_ms']:.2f} ms  "
                  f"ratio {row['sdpa_ms'] / row['tileattn_ms']:.2f}", flush=True)
        for shape in args.decode.split(","):
            B, P = (int(x) for x in shape.split("x"))
            ids = torch.randint(1, 32000, (B, P), generator=g).cuda()
            row = dict(kind="step", B=B, prompt=P)
            for impl, m in models.items():
                row[impl + "_ms"] = decode_step_ms(m, ids, timer)
            rows.append(row)
            print(f"decode step B{B} cache {P}: tileattn {row['tileattn_ms']:.3f} ms  sdpa {row['sdpa_ms']:.3f} ms  "
                  f"ratio {row['sdpa_ms'] / row['tileattn_ms']:.2f}", flush=True)
        for shape in args.decode.split(","):
            B, P = (int(x) for x in shape.split("x"))
            ids = torch.randint(1, 32000, (B, P), generator=g).cuda()
            mask = torch.ones_like(ids)
            row = dict(kind="decode", B=B, prompt=P, new_tokens=args.new_tokens)
            for impl, m in models.items():
                generate_ms(m, ids, mask, 2)  # warm-up
                per = []
                for _ in range(args.runs):
                    one, _ = generate_ms(m, ids, mask, 1)
                    many, _ = generate_ms(m, ids, mask, args.new_tokens + 1)
                    per.append((many - one) / args.new_tokens)
                row[impl + "_ms_per_token"] = statistics.median(per)
            rows.append(row)
            print(f"decode B{B} prompt {P}: tileattn {row['tileattn_ms_per_token']:.2f} ms/token  sdpa "
                  f"{row['sdpa_ms_per_token']:.2f}  ratio {row['sdpa_ms_per_token'] / row['tileattn_ms_per_token']:.2f}",
                  flush=True)
        # Agreement on a padded batch: right padding on row 1, left padding on row 2.
        ids = torch.randint(1, 32000, (3, 300), generator=g).cuda()
        mask = torch.ones_like(ids)
        mask[1, 200:] = 0
        mask[2, :120] = 0
        ids = ids.masked_fill(mask == 0, 0)
        models["eager"] = model("eager", args)
        models["eager"].load_state_dict(models["sdpa"].state_dict())
        reference = model("sdpa", args).float()
        reference.load_state_dict(models["sdpa"].state_dict())
        valid = mask.bool()
        truth = reference(input_ids=ids, attention_mask=mask).logits.double()[valid]
        del reference
        err = {impl: (m(input_ids=ids, attention_mask=mask).logits.double()[valid] - truth).abs().max().item()
               for impl, m in models.items()}
        # Greedy generation, 16 prompts of 200 tokens left-padded by 0..115: random weights make
        # near-flat logits, so one rounding flips a token and the rest of the row with it; many
        # rows and the tokens before the first difference make the comparison a statistic.
        gids = torch.randint(1, 32000, (16, 200), generator=g).cuda()
        gmask = torch.ones_like(gids)
        for r in range(16):
            gmask[r, :(r * 29) % 116] = 0
        gids = gids.masked_fill(gmask == 0, 0)
        gen = {impl: generate_ms(m, gids, gmask, 32)[1][:, 200:] for impl, m in models.items()}
        agree, prefix = {}, {}
        for impl in ("tileattn", "eager"):
            same = gen[impl] == gen["sdpa"]
            agree[impl] = same.float().mean().item()
            prefix[impl] = same.int().cumprod(dim=1).sum(dim=1).float().mean().item()
        # The same question without the cascade: every path reads the prompts followed by sdpa's
        # 32 greedy tokens in one forward, and each position's argmax is compared with sdpa's
        # (16 x 32 next-token choices under one prefix, not a run that diverges once).
        full = torch.cat([gids, gen["sdpa"]], dim=1)
        fmask = torch.cat([gmask, torch.ones_like(gen["sdpa"])], dim=1)
        choice = {impl: m(input_ids=full, attention_mask=fmask).logits[:, 199:-1].argmax(-1)
                  for impl, m in models.items()}
        forced = {impl: (choice[impl] == choice["sdpa"]).float().mean().item() for impl in ("tileattn", "eager")}
        rows.append(dict(kind="agree", max_logit_err=err, max_logit=truth.abs().max().item(),
                         greedy_token_agreement_with_sdpa=agree, tokens_before_first_difference=prefix,
                         next_token_agreement_with_sdpa=forced))
        print(f"padded batch: max |logit - fp32| tileattn {err['tileattn']:.4f} sdpa {err['sdpa']:.4f} eager "
              f"{err['eager']:.4f} (logits up to {truth.abs().max().item():.2f}); greedy tokens shared with sdpa "
              f"(16 x 32): tileattn {agree['tileattn']:.3f} eager {agree['eager']:.3f}; tokens before the first "
              f"difference: tileattn {prefix['tileattn']:.1f} eager {prefix['eager']:.1f}; next-token choices shared with "
              f"sdpa under sdpa's prefix: tileattn {forced['tileattn']:.3f} eager {forced['eager']:.3f}")
    if args.out:
        meta = dict(date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                    commit=os.environ.get("TILEATTN_COMMIT", ""),
                    gpu=torch.cuda.get_device_name(0), torch=torch.__version__, transformers=transformers.__version__,
                    timer=timers.describe(20, 3) + "; decode: perf_counter around generate()", layers=args.layers)
        with open(args.out, "w") as f:
            json.dump(dict(meta=meta, rows=rows), f, indent=1)


if __name__ == "__main__":
    with timers.bench_stream():  # one stream, as every benchmark (timer.py)
        sys.exit(main())
