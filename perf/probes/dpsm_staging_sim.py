#!/usr/bin/env python3
# Desk check of gqa_dp_softmax_kernel's (backends/cuda/gqa_rope_backward_attn_sm90.cu, third form) P staging and
# read-back index math, without a GPU, for WG = 1 and 2 warpgroups per CTA: the issue loop's 16-byte chunk copies of
# each P row's 64-key piece (any even byte) into a stage, including the tensor's last chunk past its end (exact loads),
# the accumulator rows' pair reads (two words + byte_perm + the pad masks) and the store rows' 8-element reads for P's
# padded copy, each compared with P (0 where the column or row is padding). Run: python3 perf/probes/dpsm_staging_sim.py
import random, struct
import os
kBlk, kPRow = 64, int(os.environ.get("PROW", "160"))  # 160: the two-CTA and wide forms; 144: on3
def run(S, BH, seed, WG):
    checks = 0
    kRows, kWg = 64 * WG, 128 * WG
    rnd = random.Random(seed)
    Sp = (S + 7) // 8 * 8
    nt = (Sp + kBlk - 1) // kBlk
    n_el = BH * S * S
    P = [rnd.randrange(1, 65535) for _ in range(n_el)]
    mem = b''.join(struct.pack('<H', x) for x in P)
    pbase = 1 << 20; pend = pbase + 2 * n_el  # a device-like address (the kernel's null test)
    def rd(addr, n):
        assert pbase <= addr and addr + n <= pend, ("OOB", addr, n, pend)
        return mem[addr - pbase:addr - pbase + n]
    kPChunks = (kRows * 9 + kWg - 1) // kWg
    for bh in range(BH):
        for q0 in range(0, Sp, kRows):
            row_at = lambda i: pbase + 2 * ((bh * S + q0 + i) * S)
            pch, plim, pdst = {}, {}, {}
            for tid in range(kWg):
                for u in range(kPChunks):
                    idx = tid + u * kWg; i, c = idx // 9, idx % 9
                    ok = idx < kRows * 9 and q0 + i < S
                    A = row_at(i) if ok else 0
                    off = A & 15
                    pch[tid, u] = A - off + 16 * c if ok else 0
                    plim[tid, u] = 16 * c - off
                    pdst[tid, u] = i * kPRow + 16 * c
            for kt in range(nt):
                k0 = kt * kBlk
                stage = bytearray(b'\xab' * (kRows * kPRow))
                n = min(S - k0, kBlk); assert n >= 1
                n2 = 2 * n
                for tid in range(kWg):
                    for u in range(kPChunks):
                        if pch[tid, u] == 0 or plim[tid, u] >= n2: continue
                        ch = pch[tid, u] + 2 * k0
                        d = pdst[tid, u]
                        if ch + 16 <= pend:
                            stage[d:d + 16] = rd(ch, 16)
                        else:
                            A = ch - plim[tid, u]; e_end = A + n2
                            for e in range(0, 16, 2):
                                if A <= ch + e < e_end: stage[d + e:d + e + 2] = rd(ch + e, 2)
                word = lambda b: struct.unpack_from('<I', stage, b)[0]
                def perm(x, y, sel):
                    bs = struct.pack('<II', x, y)
                    return bs[0:4] if sel == 0x3210 else bs[2:6]
                for w in range(4 * WG):
                    for lane in range(32):
                        g, t = lane >> 2, lane & 3
                        for h in range(2):
                            i = 16 * w + g + 8 * h
                            ok = q0 + i < S
                            off = (row_at(i) & 15) if ok else 0
                            wb = i * kPRow + ((off + 4 * t) & ~3)
                            sel = 0x5432 if off & 2 else 0x3210
                            rows_n = S if ok else 0
                            lim = rows_n - k0 - 2 * t
                            for j in range(8):
                                x = bytearray(perm(word(wb + 16 * j), word(wb + 16 * j + 4), sel))
                                assert wb + 16 * j + 8 <= (i + 1) * kPRow
                                if 8 * j + 1 >= lim:
                                    if not (8 * j < lim): x[0:2] = b'\0\0'
                                    x[2:4] = b'\0\0'
                                for e in range(2):
                                    col = k0 + 8 * j + 2 * t + e
                                    want = P[(bh * S + q0 + i) * S + col] if (q0 + i < S and col < S) else 0
                                    got = struct.unpack_from('<H', x, 2 * e)[0]
                                    checks += 1
                                    assert got == want, (S, bh, q0, k0, w, lane, h, j, e, got, want)
                        for u in range(4):
                            i = 16 * w + (lane >> 3) + 4 * u; c = lane & 7
                            q, col = q0 + i, k0 + 8 * c
                            if not (q < Sp and col < Sp): continue
                            off = (row_at(i) & 15) if q < S else 0
                            b = off + 16 * c
                            pw_at = i * kPRow + (b & ~3)
                            sel = 0x5432 if b & 2 else 0x3210
                            if q < S:
                                ws = [word(pw_at + 4 * m) for m in range(5)]
                                assert pw_at + 20 <= (i + 1) * kPRow
                                v = b''.join(perm(ws[m], ws[m + 1], sel) for m in range(4))
                                vals = [struct.unpack_from('<H', v, 2 * e)[0] if col + e < S else 0 for e in range(8)]
                            else:
                                vals = [0] * 8
                            want = [P[(bh * S + q) * S + col + e] if (q < S and col + e < S) else 0 for e in range(8)]
                            assert vals == want, (S, q, col, vals, want)
    print("S", S, "BH", BH, "WG", WG, "ok", checks, "pairs")
for S, BH in [(1, 2), (7, 3), (8, 1), (75, 2), (131, 2), (200, 1), (293, 1), (449, 1), (64, 2), (65, 1)]:
    for WG in (1, 2): run(S, BH, S, WG)
