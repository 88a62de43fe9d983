#!/usr/bin/env python3
"""Is a refactor of device code free? Compares the machine code (SASS) of two builds kernel by kernel.

Two steps, both without a GPU:

  # a cubin of one source file for one arch, compiled with the build tree's own nvcc command
  python3 perf/scripts/sass_compare.py cubin --build build/cuda \\
      --source backends/cuda/vision_mha_norm_backward_attn_sm90.cu -o /tmp/after.cubin
  # the same from the older tree (e.g. after `git stash`), then
  python3 perf/scripts/sass_compare.py compare /tmp/before.cubin /tmp/after.cubin

`compare` reads the ELF section table of both cubins and compares every `.text.<kernel>` section byte for byte:
it prints the kernels that differ (with their sizes), the ones only one side has, and a count of identical ones,
and exits 1 when any kernel differs or is missing on one side (0 when all are identical). How the eleventh
session of 2026-12-01 checked its de-duplication of the mha kernels (perf/NOTES.md).

When a change adds a template parameter (the mangled names change) or adds kernels:

  python3 perf/scripts/sass_compare.py compare before.cubin after.cubin \
      --rename 'ILi4ELb1EEE=ILi4ELb1ELi68EEE' --new-ok

`--rename OLD=NEW` (repeatable) replaces the substring OLD by NEW in the first cubin's kernel names before
matching; `--new-ok` lists kernels only the second cubin has as new without counting them as differences.
"""
import argparse
import shlex
import struct
import subprocess
import sys


def text_sections(path):
    """{section name: bytes} of the .text.* sections of an ELF64 little-endian file."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise SystemExit(f"sass_compare: {path} is not a 64-bit little-endian ELF file")
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_at = headers[shstrndx][4]

    def name(offset):
        end = data.index(b"\0", names_at + offset)
        return data[names_at + offset:end].decode()

    out = {}
    for h in headers:
        sh_name, sh_type, sh_offset, sh_size = h[0], h[1], h[4], h[5]
        n = name(sh_name)
        if n.startswith(".text.") and sh_type != 8:  # 8: SHT_NOBITS
            out[n[len(".text."):]] = data[sh_offset:sh_offset + sh_size]
    return out


def renamed(name, rename):
    for old, new in rename:
        name = name.replace(old, new)
    return name


def compare(a_path, b_path, out=sys.stdout, rename=(), new_ok=False):
    """Prints the comparison; returns the number of kernels that differ or exist on one side only (with new_ok,
    kernels only b has are listed as new and not counted). rename: (old, new) substrings replaced in a's names."""
    a = {}
    for k, v in text_sections(a_path).items():
        k2 = renamed(k, rename)
        if k2 in a:
            raise SystemExit(f"sass_compare: --rename maps two kernels of {a_path} to {k2}")
        a[k2] = v
    b = text_sections(b_path)
    bad = 0
    for k in sorted(set(a) | set(b)):
        if k not in b:
            print(f"only in {a_path}: {k}", file=out)
            bad += 1
        elif k not in a:
            if new_ok:
                print(f"new in {b_path}: {k}", file=out)
            else:
                print(f"only in {b_path}: {k}", file=out)
                bad += 1
        elif a[k] != b[k]:
            print(f"differs ({len(a[k])} -> {len(b[k])} bytes): {k}", file=out)
            bad += 1
    same = sum(1 for k in a if k in b and a[k] == b[k])
    print(f"{same} kernels identical, {bad} not", file=out)
    return bad


def cubin_command(ninja_line, arch, output):
    """The build's nvcc command for one object, rewritten to write a cubin for `arch` only."""
    args = shlex.split(ninja_line)
    kept, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("-MD",):
            continue
        if a in ("-MT", "-MF", "-o"):
            skip = True
            continue
        if a.startswith("--generate-code=") or a.startswith("-gencode"):
            continue
        if a == "-c":
            continue
        kept.append(a)
    return kept + [f"-arch={arch}", "--cubin", "-o", output]


def make_cubin(build, source, arch, output):
    target = f"CMakeFiles/attnbwd_cuda.dir/{source}.o"
    lines = subprocess.run(["ninja", "-C", build, "-t", "commands", target], check=True, stdout=subprocess.PIPE,
                           text=True).stdout.strip().splitlines()
    if not lines:
        raise SystemExit(f"sass_compare: ninja knows no command for {target} in {build}")
    cmd = cubin_command(lines[-1], arch, output)
    subprocess.run(cmd, check=True, cwd=build)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("cubin", help="compile one source of the build tree to a cubin")
    c.add_argument("--build", required=True)
    c.add_argument("--source", required=True, help="path relative to the repository root, as in the build")
    c.add_argument("--arch", default="sm_90a")
    c.add_argument("-o", dest="output", required=True)
    d = sub.add_parser("compare", help="compare the kernels of two cubins")
    d.add_argument("a")
    d.add_argument("b")
    d.add_argument("--rename", action="append", default=[], metavar="OLD=NEW",
                   help="replace the substring OLD by NEW in the first cubin's kernel names (repeatable)")
    d.add_argument("--new-ok", action="store_true", help="kernels only the second cubin has are not differences")
    args = ap.parse_args(argv)
    if args.cmd == "cubin":
        make_cubin(args.build, args.source, args.arch, args.output)
        return 0
    rename = []
    for r in args.rename:
        if "=" not in r or not r.split("=", 1)[0]:
            ap.error(f"--rename wants OLD=NEW, got {r!r}")
        rename.append(tuple(r.split("=", 1)))
    return 1 if compare(args.a, args.b, rename=rename, new_ok=args.new_ok) else 0


if __name__ == "__main__":
    sys.exit(main())
