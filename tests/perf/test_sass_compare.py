#!/usr/bin/env python3
"""Test of perf/scripts/sass_compare.py without nvcc or a GPU: small ELF64 files written here (a section-name
table, two or three .text.<kernel> sections and a non-text section) stand in for cubins. Checks that identical
kernels compare equal whatever else differs, that one changed byte, a kernel only one side has and a changed size
are each reported and make the exit status 1, that a non-ELF file is refused, and how a build's nvcc command is
rewritten into a cubin command.

    python3 tests/perf/test_sass_compare.py        (plain unittest)
"""
import importlib.util
import io
import pathlib
import struct
import tempfile
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("sass_compare", ROOT / "perf" / "scripts" / "sass_compare.py")
sc = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(sc)


def write_elf(path, sections):
    """An ELF64 little-endian file with `sections` ({name: bytes}) after a null section and .shstrtab."""
    names = [".shstrtab"] + list(sections)
    strtab = b"\0"
    offsets = {}
    for n in names:
        offsets[n] = len(strtab)
        strtab += n.encode() + b"\0"
    body = b""
    placed = {}
    data_start = 64
    for n in names:
        blob = strtab if n == ".shstrtab" else sections[n]
        placed[n] = (data_start + len(body), len(blob))
        body += blob
    shoff = data_start + len(body)
    shoff += (-shoff) % 8
    body += b"\0" * (shoff - data_start - len(body))
    header = bytearray(64)
    header[0:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<Q", header, 0x28, shoff)
    struct.pack_into("<HHH", header, 0x3A, 64, len(names) + 1, 1)
    table = b"\0" * 64  # the null section
    for n in names:
        off, size = placed[n]
        sh_type = 3 if n == ".shstrtab" else 1
        table += struct.pack("<IIQQQQIIQQ", offsets[n], sh_type, 0, 0, off, size, 0, 0, 1, 0)
    path.write_bytes(bytes(header) + body + table)


class SassCompare(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.d = pathlib.Path(self.dir.name)

    def tearDown(self):
        self.dir.cleanup()

    def run_compare(self, a, b):
        out = io.StringIO()
        bad = sc.compare(str(a), str(b), out=out)
        return bad, out.getvalue()

    def test_identical_kernels_compare_equal_whatever_else_differs(self):
        write_elf(self.d / "a", {".text.k1": b"\x01" * 32, ".text.k2": b"\x02" * 48, ".nv.info": b"x"})
        write_elf(self.d / "b", {".nv.info": b"other", ".text.k2": b"\x02" * 48, ".text.k1": b"\x01" * 32})
        bad, text = self.run_compare(self.d / "a", self.d / "b")
        self.assertEqual(bad, 0)
        self.assertIn("2 kernels identical, 0 not", text)
        self.assertEqual(sc.main(["compare", str(self.d / "a"), str(self.d / "b")]), 0)

    def test_one_changed_byte_is_reported(self):
        write_elf(self.d / "a", {".text.k1": b"\x01" * 32, ".text.k2": b"\x02" * 48})
        changed = bytearray(b"\x02" * 48)
        changed[17] = 3
        write_elf(self.d / "b", {".text.k1": b"\x01" * 32, ".text.k2": bytes(changed)})
        bad, text = self.run_compare(self.d / "a", self.d / "b")
        self.assertEqual(bad, 1)
        self.assertIn("differs (48 -> 48 bytes): k2", text)
        self.assertNotIn(": k1", text)
        self.assertEqual(sc.main(["compare", str(self.d / "a"), str(self.d / "b")]), 1)

    def test_missing_kernel_and_changed_size_are_reported(self):
        write_elf(self.d / "a", {".text.k1": b"\x01" * 32, ".text.gone": b"\x05" * 16})
        write_elf(self.d / "b", {".text.k1": b"\x01" * 48, ".text.new": b"\x06" * 16})
        bad, text = self.run_compare(self.d / "a", self.d / "b")
        self.assertEqual(bad, 3)
        self.assertIn("differs (32 -> 48 bytes): k1", text)
        self.assertIn("only in " + str(self.d / "a") + ": gone", text)
        self.assertIn("only in " + str(self.d / "b") + ": new", text)
        self.assertIn("0 kernels identical, 3 not", text)

    def test_renamed_kernels_match_and_new_kernels_may_be_allowed(self):
        write_elf(self.d / "a", {".text.kILb1EE": b"\x01" * 32, ".text.kILb0EE": b"\x02" * 32})
        write_elf(self.d / "b", {".text.kILb1ELi68EE": b"\x01" * 32, ".text.kILb0ELi68EE": b"\x02" * 32,
                                 ".text.kILb1ELi72EE": b"\x03" * 32})
        bad, text = self.run_compare(self.d / "a", self.d / "b")
        self.assertEqual(bad, 5)  # without the rename nothing matches
        rename = ["EE=ELi68EE"]
        self.assertEqual(sc.main(["compare", str(self.d / "a"), str(self.d / "b"), "--rename", rename[0]]), 1)
        out = io.StringIO()
        bad = sc.compare(str(self.d / "a"), str(self.d / "b"), out=out, rename=[("EE", "ELi68EE")], new_ok=True)
        self.assertEqual(bad, 0)
        self.assertIn("new in " + str(self.d / "b") + ": kILb1ELi72EE", out.getvalue())
        self.assertIn("2 kernels identical, 0 not", out.getvalue())
        self.assertEqual(sc.main(["compare", str(self.d / "a"), str(self.d / "b"), "--rename", rename[0],
                                  "--new-ok"]), 0)
        # a changed kernel under its new name is still a difference
        write_elf(self.d / "b", {".text.kILb1ELi68EE": b"\x01" * 31 + b"\x09", ".text.kILb0ELi68EE": b"\x02" * 32})
        self.assertEqual(sc.main(["compare", str(self.d / "a"), str(self.d / "b"), "--rename", rename[0],
                                  "--new-ok"]), 1)

    def test_a_file_that_is_not_elf_is_refused(self):
        (self.d / "x").write_bytes(b"not an elf file at all" * 4)
        write_elf(self.d / "b", {".text.k1": b"\x01"})
        with self.assertRaises(SystemExit):
            sc.compare(str(self.d / "x"), str(self.d / "b"))

    def test_build_command_becomes_a_cubin_command(self):
        line = ("/usr/local/cuda/bin/nvcc -forward-unknown-to-host-compiler -I/src -O3 -std=c++17 "
                "\"--generate-code=arch=compute_90a,code=[compute_90a,sm_90a]\" "
                "\"--generate-code=arch=compute_100a,code=[compute_100a,sm_100a]\" -MD "
                "-MT CMakeFiles/x.dir/a.cu.o -MF CMakeFiles/x.dir/a.cu.o.d -x cu -c /src/a.cu "
                "-o CMakeFiles/x.dir/a.cu.o")
        cmd = sc.cubin_command(line, "sm_90a", "/tmp/out.cubin")
        self.assertEqual(cmd[0], "/usr/local/cuda/bin/nvcc")
        self.assertEqual(cmd[-4:], ["-arch=sm_90a", "--cubin", "-o", "/tmp/out.cubin"])
        for gone in ("-c", "-MD", "-MT", "-MF", "CMakeFiles/x.dir/a.cu.o", "CMakeFiles/x.dir/a.cu.o.d"):
            self.assertNotIn(gone, cmd)
        self.assertFalse(any(a.startswith("--generate-code") for a in cmd))
        for kept in ("-I/src", "-O3", "-std=c++17", "-x", "cu", "/src/a.cu"):
            self.assertIn(kept, cmd)


if __name__ == "__main__":
    unittest.main()
