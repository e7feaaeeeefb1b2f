#!/usr/bin/env python3
"""check_sass.py OBJ...: every sm90 forward kernel in the objects keeps its mainloop's wgmma
descriptors in uniform registers. A value the compiler cannot prove warp-uniform (or one pushed out
of the uniform registers) makes it compute each descriptor in vector registers and move it with an
R2UR before every wgmma; the split-KV merge inside the tile loop did that to every serving kernel
(docs/kernels/sm90.md, "Uniform registers"). The mainloop is the kernel's largest run of HGMMAs;
more than 4 R2UR in and just before it fails. Needs cuobjdump and nvdisasm on PATH."""
import re
import subprocess
import sys

LIMIT = 4


def instructions(body):
    out = []
    for line in body.splitlines():
        m = re.match(r"\s+/\*[0-9a-f]{4,}\*/\s+(.*?);", line)
        if m:
            out.append(re.sub(r"^@!?U?P\w+\s+", "", m.group(1)).strip())
    return out


def mainloop_r2ur(instrs):
    at = [i for i, x in enumerate(instrs) if x.startswith("HGMMA")]
    if not at:
        return None, 0
    clusters, start, prev = [], at[0], at[0]
    for i in at[1:]:
        if i - prev > 300:
            clusters.append((start, prev))
            start = i
        prev = i
    clusters.append((start, prev))
    count = lambda c: sum(1 for i in at if c[0] <= i <= c[1])
    best = max(clusters, key=count)
    window = instrs[max(0, best[0] - 80) : best[1] + 5]
    return count(best), sum(1 for x in window if x.startswith("R2UR"))


def main(objs):
    checked, bad = 0, []
    for obj in objs:
        sass = subprocess.run(["cuobjdump", "-sass", obj], capture_output=True, text=True, check=True).stdout
        parts = re.split(r"\n\s+Function : (\S+)\n", sass)
        for name, body in zip(parts[1::2], parts[2::2]):
            if "attention_fwd_sm90" not in name:
                continue
            hgmma, r2ur = mainloop_r2ur(instructions(body))
            if hgmma is None:
                continue
            checked += 1
            if r2ur > LIMIT:
                bad.append(f"  {name[:160]}: {r2ur} R2UR around its {hgmma} mainloop HGMMAs")
    print(f"check_sass: {checked} sm90 forward kernel(s) checked" + ("" if bad else ", descriptors uniform"))
    if bad:
        print("check_sass: wgmma descriptors in vector registers:\n" + "\n".join(bad))
    return 1 if bad or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
