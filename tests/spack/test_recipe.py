#!/usr/bin/env python3
"""Dry-run test of the Spack recipe, without Spack.

Loads spack/spack_repo/attnbwd/packages/attnbwd/package.py against small fake `spack.package` and
`spack_repo.builtin.build_systems.*` modules that record the directives (version, variant,
depends_on, conflicts, ...), then checks, for several specs:
  - cmake_args(): the CMake options the recipe passes, and that each one exists in our CMake files;
  - which depends_on/conflicts directives apply (a tiny evaluator of the `when=` specs the recipe
    uses), e.g. that cuda_arch is forwarded to kokkos and kokkos-kernels and the CUDA minimums;
  - the test hooks: the consumer configure line, skip without a GPU, install-time wiring.
What it cannot check: Spack's real concretizer, fetching, and an actual build (Spack is not here).

    python3 tests/spack/test_recipe.py        (plain unittest, no pytest needed)
"""
import importlib.util
import os
import pathlib
import re
import sys
import types
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]
REPO = ROOT / "spack" / "spack_repo" / "attnbwd"
RECIPE = REPO / "packages" / "attnbwd" / "package.py"

# CudaPackage.cuda_arch_values of Spack's builtin repository (spack-packages, 2025).
CUDA_ARCH_VALUES = (
    "10", "11", "12", "13", "20", "21", "30", "32", "35", "37", "50", "52", "53", "60", "61", "62",
    "70", "72", "75", "80", "86", "87", "89", "90", "90a", "100", "100a", "100f", "101", "101a",
    "101f", "103", "103a", "103f", "110", "110a", "110f", "120", "120a", "120f", "121", "121a",
    "121f",
)


# ---- a tiny spec model: enough for the constraints this recipe writes ------------------------------

def parse_version(text):
    return tuple(int(x) for x in text.split("."))


def version_satisfies(version, constraint):
    """Spack version ranges: "X" (X or X.*), "X:" (at least X), ":Y" (at most Y.*), "X:Y"."""
    v = parse_version(version)
    if ":" not in constraint:
        c = parse_version(constraint)
        return v[: len(c)] == c
    lo, hi = constraint.split(":", 1)
    if lo and v < parse_version(lo):
        return False
    if hi:
        h = parse_version(hi)
        if v[: len(h)] > h:
            return False
    return True


def split_spec(text):
    """'kokkos+cuda cuda_arch=90' -> ('kokkos', ['+cuda', 'cuda_arch=90']); anonymous specs give ''."""
    text = text.strip()
    m = re.match(r"^([A-Za-z0-9_-]*)(.*)$", text)
    name, rest = m.group(1), m.group(2)
    if "=" in name or (rest.startswith("=")):  # 'cuda_arch=none' is anonymous
        name, rest = "", text
    tokens = re.findall(r"\^[^\s]+|@[^\s+~^]+|[+~][A-Za-z0-9_]+|[A-Za-z0-9_]+=[^\s]+", rest)
    return name, tokens


class FakeDep:
    def __init__(self, name, version, variants):
        self.name = name
        self.version = version
        self.variants = variants
        self.prefix = Prefix(f"/opt/{name}")

    def satisfies(self, tokens):
        return all(token_satisfied(t, self.version, self.variants, {}) for t in tokens)


def token_satisfied(token, version, variants, deps):
    if token.startswith("^"):
        name, sub = split_spec(token[1:])
        dep = deps.get(name)
        return dep is not None and dep.satisfies(sub)
    if token.startswith("@"):
        return version_satisfies(version, token[1:])
    if token[0] in "+~":
        value = variants.get(token[1:], False)
        return bool(value) == (token[0] == "+")
    key, value = token.split("=", 1)
    have = variants.get(key, "none")
    if isinstance(have, tuple):
        return all(v in have for v in value.split(",")) if value != "none" else not have
    return str(have) == value


class Variant:
    def __init__(self, value):
        self.value = value


class FakeSpec:
    """attnbwd@main with the given variants; dependencies at the given versions/variants."""

    def __init__(self, cuda=False, cuda_arch=(), openmp=False, tests=False, perf=False,
                 kokkos="4.4.01", kokkos_variants=None):
        self.version = "0.1.0"
        self.flat = {"cuda": cuda, "openmp": openmp, "tests": tests, "perf": perf}
        if cuda:
            self.flat["cuda_arch"] = tuple(cuda_arch)
        self.variants = {k: Variant(v) for k, v in self.flat.items()}
        kv = dict(kokkos_variants or {})
        self.deps = {
            "kokkos": FakeDep("kokkos", kokkos, kv),
            "kokkos-kernels": FakeDep("kokkos-kernels", kokkos, kv),
            "cmake": FakeDep("cmake", "3.31.0", {}),
            "cuda": FakeDep("cuda", "13.0.0", {}),
        }
        self.deps["cmake"].command = Recorder("cmake")

    def satisfies(self, constraint):
        if not constraint:
            return True
        name, tokens = split_spec(constraint)
        assert name in ("", "attnbwd"), constraint
        return all(token_satisfied(t, self.version, self.flat, self.deps) for t in tokens)

    def __getitem__(self, name):
        return self.deps[name]


class Prefix(str):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return Prefix(os.path.join(self, name))


class Recorder:
    """An Executable stand-in: records calls, returns `output`."""

    def __init__(self, name, output=""):
        self.name = name
        self.output = output
        self.calls = []

    def __call__(self, *args, **kwargs):
        self.calls.append(args)
        return self.output


# ---- fake spack modules ----------------------------------------------------------------------------

DIRECTIVES = []  # (kind, args, kwargs) in the order the recipe's class body runs them
EXECUTABLES = {}


def _directive(kind):
    def record(*args, **kwargs):
        DIRECTIVES.append((kind, args, kwargs))

    return record


def install_fake_spack():
    pkg = types.ModuleType("spack.package")
    for kind in ("version", "variant", "depends_on", "conflicts", "requires", "maintainers",
                 "license", "patch", "provides", "resource"):
        setattr(pkg, kind, _directive(kind))

    def run_after(phase, when=None):
        def deco(fn):
            fn.run_after_phase = phase
            return fn

        return deco

    def on_package_attributes(**attrs):
        def deco(fn):
            fn.package_attributes = attrs
            return fn

        return deco

    class SkipTest(Exception):
        pass

    class InstallError(Exception):
        pass

    def executable(path):
        return EXECUTABLES.setdefault(str(path), Recorder(str(path)))

    pkg.run_after = run_after
    pkg.on_package_attributes = on_package_attributes
    pkg.SkipTest = SkipTest
    pkg.InstallError = InstallError
    pkg.join_path = lambda *parts: os.path.join(*[str(p) for p in parts])
    pkg.which = executable
    pkg.Executable = executable
    pkg.cache_extra_test_sources = lambda pkg_, srcs: DIRECTIVES.append(("cached", (srcs,), {}))

    class PackageBase:
        pass

    pkg.PackageBase = PackageBase

    class CMakePackage(PackageBase):
        # Spack's CMakeBuilder.define / define_from_variant.
        @staticmethod
        def define(var, value):
            if isinstance(value, bool):
                kind, value = "BOOL", "ON" if value else "OFF"
            else:
                kind = "STRING"
                if isinstance(value, (list, tuple)):
                    value = ";".join(str(v) for v in value)
                else:
                    value = str(value)
            return f"-D{var}:{kind}={value}"

        def define_from_variant(self, var, variant=None):
            return self.define(var, self.spec.variants[variant or var.lower()].value)

    class CudaPackage(PackageBase):
        cuda_arch_values = CUDA_ARCH_VALUES

    spack = types.ModuleType("spack")
    spack.package = pkg
    cmake_mod = types.ModuleType("spack_repo.builtin.build_systems.cmake")
    cmake_mod.CMakePackage = CMakePackage
    cuda_mod = types.ModuleType("spack_repo.builtin.build_systems.cuda")
    cuda_mod.CudaPackage = CudaPackage
    mods = {
        "spack": spack,
        "spack.package": pkg,
        "spack_repo": types.ModuleType("spack_repo"),
        "spack_repo.builtin": types.ModuleType("spack_repo.builtin"),
        "spack_repo.builtin.build_systems": types.ModuleType("spack_repo.builtin.build_systems"),
        "spack_repo.builtin.build_systems.cmake": cmake_mod,
        "spack_repo.builtin.build_systems.cuda": cuda_mod,
    }
    sys.modules.update(mods)
    return pkg


def load_recipe():
    DIRECTIVES.clear()
    os.environ.pop("ATTNBWD_GIT", None)
    fake = install_fake_spack()
    spec = importlib.util.spec_from_file_location("spack_repo.attnbwd.packages.attnbwd.package", RECIPE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, fake, list(DIRECTIVES)


MODULE, FAKE, CLASS_DIRECTIVES = load_recipe()
Attnbwd = MODULE.Attnbwd


class KokkosPkg:
    kokkos_cxx = "/opt/kokkos/bin/nvcc_wrapper"


def package(**spec_args):
    pkg = Attnbwd.__new__(Attnbwd)
    pkg.spec = FakeSpec(**spec_args)
    pkg.prefix = Prefix("/opt/attnbwd")
    pkg.__class__.__getitem__ = lambda self, name: KokkosPkg() if name == "kokkos" else None
    pkg.stage = types.SimpleNamespace(path="/stage", source_path="/stage/src")
    pkg.test_suite = types.SimpleNamespace(current_test_cache_dir="/test-cache")
    return pkg


def cmake_defines(args):
    """['-DX:BOOL=ON', ...] -> {'X': 'ON'}"""
    out = {}
    for a in args:
        m = re.match(r"^-D([^:=]+)(?::[A-Z]+)?=(.*)$", a)
        assert m, a
        out[m.group(1)] = m.group(2)
    return out


def applicable(spec, kind):
    """The (spec string, kwargs) of every `kind` directive whose when= holds for `spec`."""
    out = []
    for k, args, kwargs in CLASS_DIRECTIVES:
        if k == kind and spec.satisfies(kwargs.get("when")):
            out.append((args[0], kwargs))
    return out


def constraints_on(spec, dep):
    """All constraint tokens the applicable depends_on directives put on `dep`."""
    tokens = []
    for text, _ in applicable(spec, "depends_on"):
        name, toks = split_spec(text)
        if name == dep:
            tokens += toks
    return tokens


class CMakeArgs(unittest.TestCase):
    def test_default_spec(self):
        d = cmake_defines(package().cmake_args())
        self.assertEqual(d["ATTNBWD_ENABLE_CUDA"], "OFF")
        self.assertEqual(d["ATTNBWD_ENABLE_TESTS"], "OFF")
        self.assertEqual(d["ATTNBWD_ENABLE_PERF"], "OFF")
        self.assertEqual(d["ATTNBWD_ENABLE_TOOLS"], "ON")
        self.assertEqual(d["Kokkos_ROOT"], "/opt/kokkos")
        self.assertEqual(d["KokkosKernels_ROOT"], "/opt/kokkos-kernels")
        self.assertEqual(d["ATTNBWD_SOLEXEC_DIR"], "")
        self.assertNotIn("CMAKE_CXX_COMPILER", d)
        self.assertNotIn("ATTNBWD_CUDA_ARCHITECTURES", d)

    def test_openmp_changes_dependencies_only(self):
        self.assertEqual(package(openmp=True).cmake_args(), package().cmake_args())

    def test_tests_and_perf(self):
        d = cmake_defines(package(tests=True, perf=True).cmake_args())
        self.assertEqual((d["ATTNBWD_ENABLE_TESTS"], d["ATTNBWD_ENABLE_PERF"]), ("ON", "ON"))

    def test_cuda_fast_path_archs(self):
        for arch, fast in (("90", "90a"), ("90a", "90a"), ("100", "100a"), ("100a", "100a")):
            with self.subTest(cuda_arch=arch):
                d = cmake_defines(package(cuda=True, cuda_arch=(arch,)).cmake_args())
                self.assertEqual(d["ATTNBWD_ENABLE_CUDA"], "ON")
                self.assertEqual(d["ATTNBWD_CUDA_ARCHITECTURES"], fast)
                self.assertEqual(d["CMAKE_CXX_COMPILER"], KokkosPkg.kokkos_cxx)
                self.assertEqual(d["CUDAToolkit_ROOT"], "/opt/cuda")

    def test_cuda_other_arch_is_portable_only(self):
        for arch in ("80", "89", "120"):
            with self.subTest(cuda_arch=arch):
                d = cmake_defines(package(cuda=True, cuda_arch=(arch,)).cmake_args())
                self.assertEqual(d["ATTNBWD_ENABLE_CUDA"], "OFF")
                self.assertNotIn("ATTNBWD_CUDA_ARCHITECTURES", d)
                self.assertEqual(d["CMAKE_CXX_COMPILER"], KokkosPkg.kokkos_cxx)  # Kokkos CUDA still

    def test_every_option_exists_in_cmake(self):
        cmake_text = (ROOT / "CMakeLists.txt").read_text()
        for f in (ROOT / "cmake").glob("*.cmake"):
            cmake_text += f.read_text()
        declared = set(re.findall(r"option\(\s*(\w+)", cmake_text))
        declared |= set(re.findall(r"set\(\s*(\w+)\s+[^)]*CACHE", cmake_text))
        standard = {"Kokkos_ROOT", "KokkosKernels_ROOT", "CUDAToolkit_ROOT", "CMAKE_CXX_COMPILER"}
        for spec_args in ({}, {"tests": True, "perf": True}, {"cuda": True, "cuda_arch": ("90",)}):
            for name in cmake_defines(package(**spec_args).cmake_args()):
                with self.subTest(option=name):
                    self.assertTrue(name in declared or name in standard, f"{name} not in CMake files")


class Directives(unittest.TestCase):
    def test_build_dependencies(self):
        deps = {args[0]: kw for k, args, kw in CLASS_DIRECTIVES if k == "depends_on"}
        self.assertEqual(deps["cmake@3.25:"].get("type"), "build")
        self.assertIn("kokkos@3.4:", deps)
        self.assertIn("kokkos-kernels@3.4:", deps)
        self.assertEqual(deps["googletest"]["when"], "+tests")
        self.assertEqual(deps["benchmark"]["when"], "+perf")

    def test_kokkos_matches_kokkos_kernels(self):
        for kk in ("3.7.02", "4.4.01", "4.6.00", "5.0.0"):
            with self.subTest(kokkos_kernels=kk):
                spec = FakeSpec(kokkos=kk)
                series = ".".join(kk.split(".")[:2])
                self.assertIn(f"@{series}", constraints_on(spec, "kokkos"))
                # ...and no other series
                others = [t for t in constraints_on(spec, "kokkos") if re.match(r"^@\d+\.\d+$", t)]
                self.assertEqual(others, [f"@{series}"])

    def test_openmp_forwarded(self):
        self.assertIn("+openmp", constraints_on(FakeSpec(openmp=True), "kokkos"))
        self.assertIn("+openmp", constraints_on(FakeSpec(openmp=True), "kokkos-kernels"))
        self.assertNotIn("+openmp", constraints_on(FakeSpec(), "kokkos"))
        self.assertIn("+serial", constraints_on(FakeSpec(), "kokkos"))

    def test_cuda_arch_forwarded(self):
        for arch, karch in (("90", "90"), ("90a", "90"), ("100", "100"), ("100a", "100"), ("80", "80")):
            with self.subTest(cuda_arch=arch):
                spec = FakeSpec(cuda=True, cuda_arch=(arch,))
                for dep in ("kokkos", "kokkos-kernels"):
                    toks = constraints_on(spec, dep)
                    self.assertIn("+cuda", toks)
                    self.assertEqual([t for t in toks if t.startswith("cuda_arch=")], [f"cuda_arch={karch}"])
        self.assertIn("~cuda", constraints_on(FakeSpec(), "kokkos"))

    def test_cuda_lambda_for_kokkos_up_to_4(self):
        self.assertIn("+cuda_lambda", constraints_on(FakeSpec(cuda=True, cuda_arch=("90",)), "kokkos"))
        spec5 = FakeSpec(cuda=True, cuda_arch=("90",), kokkos="5.0.0")
        self.assertNotIn("+cuda_lambda", constraints_on(spec5, "kokkos"))

    def test_cuda_minimums(self):
        self.assertIn("@12.0:", constraints_on(FakeSpec(cuda=True, cuda_arch=("90",)), "cuda"))
        self.assertIn("@12.8:", constraints_on(FakeSpec(cuda=True, cuda_arch=("100",)), "cuda"))
        self.assertIn("@12.8:", constraints_on(FakeSpec(cuda=True, cuda_arch=("100a",)), "cuda"))
        self.assertEqual(constraints_on(FakeSpec(), "cuda"), [])

    def test_conflicts(self):
        def conflicting(spec):
            return [text for text, _ in applicable(spec, "conflicts") if spec.satisfies(text)]

        self.assertTrue(conflicting(FakeSpec(cuda=True, cuda_arch=())))  # +cuda cuda_arch=none
        self.assertFalse(conflicting(FakeSpec(cuda=True, cuda_arch=("90",))))
        self.assertFalse(conflicting(FakeSpec(cuda=True, cuda_arch=("80",))))  # portable path only
        self.assertFalse(conflicting(FakeSpec()))
        self.assertFalse(conflicting(FakeSpec(openmp=True, tests=True, perf=True)))

    def test_variants_and_version(self):
        variants = {args[0]: kw for k, args, kw in CLASS_DIRECTIVES if k == "variant"}
        for name in ("openmp", "tests", "perf"):
            self.assertIn(name, variants)
            self.assertIs(variants[name]["default"], False)
        versions = [args[0] for k, args, kw in CLASS_DIRECTIVES if k == "version"]
        self.assertIn("main", versions)
        self.assertTrue(issubclass(Attnbwd, sys.modules["spack_repo.builtin.build_systems.cuda"].CudaPackage))
        self.assertEqual(Attnbwd.git, ROOT.as_uri())  # this checkout


class TestHooks(unittest.TestCase):
    def setUp(self):
        EXECUTABLES.clear()

    def test_consumer_configure_line(self):
        args = package().consumer_cmake_args("/src", "/bld")
        d = cmake_defines([a for a in args if a.startswith("-D")])
        self.assertEqual(d["CMAKE_PREFIX_PATH"], "/opt/attnbwd;/opt/kokkos;/opt/kokkos-kernels")
        self.assertEqual(args[:4], ["-S", "/src", "-B", "/bld"])
        d = cmake_defines([a for a in package(cuda=True, cuda_arch=("90",)).consumer_cmake_args("/s", "/b")
                           if a.startswith("-D")])
        self.assertEqual(d["CMAKE_CXX_COMPILER"], KokkosPkg.kokkos_cxx)
        self.assertTrue(d["CMAKE_PREFIX_PATH"].endswith(";/opt/cuda"))

    def test_consumer_runs_and_checks_output(self):
        pkg = package()
        EXECUTABLES["/b/attnbwd_consumer"] = Recorder("consumer", output="...\nPASSED\n")
        pkg.build_and_run_consumer("/s", "/b")
        self.assertEqual(pkg.spec["cmake"].command.calls[-1], ("--build", "/b"))
        self.assertEqual(len(EXECUTABLES["/b/attnbwd_consumer"].calls), 1)
        EXECUTABLES["/b/attnbwd_consumer"].output = "FAILED\n"
        with self.assertRaises(AssertionError):
            pkg.build_and_run_consumer("/s", "/b")

    def test_cuda_consumer_skipped_without_gpu(self):
        pkg = package(cuda=True, cuda_arch=("90",))
        pkg.have_gpu = lambda: False
        with self.assertRaises(FAKE.SkipTest):
            pkg.build_and_run_consumer("/s", "/b")
        self.assertEqual(len(pkg.spec["cmake"].command.calls), 2)  # configured and built anyway

    def test_stand_alone_and_install_time_wiring(self):
        self.assertTrue(Attnbwd.test_requires_compiler)
        for name in ("test_consumer", "test_cli"):
            self.assertTrue(getattr(Attnbwd, name).__doc__, f"{name} needs a docstring (its purpose)")
        self.assertEqual(Attnbwd.check_consumer.run_after_phase, "install")
        self.assertEqual(Attnbwd.check_consumer.package_attributes, {"run_tests": True})
        self.assertEqual(Attnbwd.cache_consumer_sources.run_after_phase, "install")
        DIRECTIVES.clear()
        package().cache_consumer_sources()
        self.assertEqual(DIRECTIVES, [("cached", (["tests/install"],), {})])
        self.assertTrue((ROOT / "tests" / "install" / "CMakeLists.txt").is_file())

    def test_cli(self):
        EXECUTABLES["/opt/attnbwd/bin/attnbwd"] = Recorder(
            "attnbwd", output="out_proj_backward gqa_rope_backward vision_mha_norm_backward")
        package().test_cli()
        self.assertEqual(EXECUTABLES["/opt/attnbwd/bin/attnbwd"].calls, [("list",)])


class RepositoryLayout(unittest.TestCase):
    def test_repo_yaml(self):
        text = (REPO / "repo.yaml").read_text()
        self.assertRegex(text, r"(?m)^repo:\s*$")
        self.assertRegex(text, r"(?m)^\s+namespace:\s*attnbwd\s*$")
        self.assertRegex(text, r"(?m)^\s+api:\s*v2\.0\s*$")

    def test_package_layout(self):
        # API v2: spack_repo/<namespace>/packages/<name as a Python identifier>/package.py
        self.assertEqual(RECIPE.relative_to(ROOT).parts,
                         ("spack", "spack_repo", "attnbwd", "packages", "attnbwd", "package.py"))
        self.assertEqual(Attnbwd.__name__, "Attnbwd")


if __name__ == "__main__":
    unittest.main(verbosity=2)
