# attnbwd: Spack recipe (package repository API v2.0, Spack 1.0 or later).
#
#   spack repo add <attnbwd checkout>/spack/spack_repo/attnbwd
#   spack install attnbwd+openmp                 # CPU: Serial + OpenMP
#   spack install attnbwd+cuda cuda_arch=90      # H100/H200: portable path + CUDA fast path (sm_90a)
#   spack test run attnbwd                       # builds tests/install against the install, runs it
#
# The logic below is unit-tested without Spack by tests/spack/test_recipe.py (fake spack modules).
import os
import pathlib

from spack_repo.builtin.build_systems.cmake import CMakePackage
from spack_repo.builtin.build_systems.cuda import CudaPackage

from spack.package import *

# This recipe lives in the attnbwd source tree (spack/spack_repo/attnbwd/packages/attnbwd/): by
# default Spack fetches the committed state of that checkout; ATTNBWD_GIT names another clone.
_SOURCE_ROOT = pathlib.Path(__file__).resolve().parents[5]

# The CUDA fast path is built for arch-specific targets, from these cuda_arch values. Every other
# cuda_arch still runs on the GPU through the portable (Kokkos) path, with the fast path off.
FAST_PATH_ARCH = {"90": "90a", "90a": "90a", "100": "100a", "100a": "100a"}

# Kokkos has no arch-specific targets: cuda_arch=90a/100a build Kokkos for 90/100.
KOKKOS_CUDA_ARCH = {"90a": "90", "100a": "100"}

# Kokkos Kernels X.Y works with Kokkos X.Y only. Spack's kokkos-kernels pins this itself for the
# versions it knows; the list repeats it for any kokkos-kernels (externals included).
KOKKOS_SERIES = (
    "3.4", "3.5", "3.6", "3.7",
    "4.0", "4.1", "4.2", "4.3", "4.4", "4.5", "4.6", "4.7",
    "5.0", "5.1",
)


class Attnbwd(CMakePackage, CudaPackage):
    """Fast, portable backward passes for four attention blocks (LFM2 output projection, Mistral GQA
    with RoPE, Molmo ViT MHA with LayerNorm, Qwen3-VL varlen ViT attention with 2D RoPE), as a C++17
    library on Kokkos with hand-tuned CUDA kernels for sm_90a and sm_100a."""

    homepage = _SOURCE_ROOT.as_uri()
    git = os.environ.get("ATTNBWD_GIT", _SOURCE_ROOT.as_uri())

    version("main", branch="main")

    variant("openmp", default=False, description="Kokkos OpenMP execution space (multicore CPUs)")
    variant("tests", default=False, description="Build the GoogleTest suite (spack install --test)")
    variant("perf", default=False, description="Build the perf suite (Google Benchmark)")

    depends_on("cxx", type="build")
    depends_on("cmake@3.25:", type="build")

    depends_on("kokkos@3.4:")
    depends_on("kokkos-kernels@3.4:")
    for _series in KOKKOS_SERIES:
        depends_on(f"kokkos@{_series}", when=f"^kokkos-kernels@{_series}")
    depends_on("kokkos+serial")
    depends_on("kokkos+openmp", when="+openmp")
    depends_on("kokkos-kernels+openmp", when="+openmp")

    # CUDA: Kokkos (and Kokkos Kernels) for the same GPU; one cuda_arch, as Kokkos takes one.
    depends_on("kokkos~cuda", when="~cuda")
    for _arch in CudaPackage.cuda_arch_values:
        _karch = KOKKOS_CUDA_ARCH.get(_arch, _arch)
        depends_on(f"kokkos+cuda cuda_arch={_karch}", when=f"+cuda cuda_arch={_arch}")
        depends_on(f"kokkos-kernels+cuda cuda_arch={_karch}", when=f"+cuda cuda_arch={_arch}")
    depends_on("kokkos+cuda_lambda", when="+cuda ^kokkos@:4")  # device lambdas (always on in Kokkos 5)
    conflicts("+cuda", when="cuda_arch=none", msg="attnbwd+cuda needs a cuda_arch (e.g. cuda_arch=90)")
    # The fast path: sm_90a needs CUDA 12.0, sm_100a CUDA 12.8; it links cuBLASLt (part of cuda).
    for _arch in ("90", "90a"):
        depends_on("cuda@12.0:", when=f"+cuda cuda_arch={_arch}")
    for _arch in ("100", "100a"):
        depends_on("cuda@12.8:", when=f"+cuda cuda_arch={_arch}")

    depends_on("googletest", when="+tests")
    depends_on("benchmark", when="+perf")

    sanity_check_is_file = [
        join_path("include", "attnbwd", "attnbwd.hpp"),
        join_path("bin", "attnbwd"),
    ]

    test_requires_compiler = True

    def fast_path_archs(self):
        """The CUDA fast path's CMake architectures for this spec (empty: fast path off)."""
        spec = self.spec
        if not spec.satisfies("+cuda"):
            return []
        archs = spec.variants["cuda_arch"].value
        return sorted({FAST_PATH_ARCH[a] for a in archs if a in FAST_PATH_ARCH})

    def cmake_args(self):
        spec = self.spec
        fast = self.fast_path_archs()
        args = [
            self.define("Kokkos_ROOT", spec["kokkos"].prefix),
            self.define("KokkosKernels_ROOT", spec["kokkos-kernels"].prefix),
            self.define_from_variant("ATTNBWD_ENABLE_TESTS", "tests"),
            self.define_from_variant("ATTNBWD_ENABLE_PERF", "perf"),
            self.define("ATTNBWD_ENABLE_TOOLS", True),
            self.define("ATTNBWD_ENABLE_CUDA", bool(fast)),
            # No benchmark data in the stage: the installed CLI reads $ATTNBWD_SOLEXEC.
            self.define("ATTNBWD_SOLEXEC_DIR", ""),
        ]
        if fast:
            args.append(self.define("ATTNBWD_CUDA_ARCHITECTURES", fast))
        if spec.satisfies("+cuda"):
            # Kokkos' CUDA code is compiled by its C++ compiler (nvcc_wrapper, or clang).
            args.append(self.define("CMAKE_CXX_COMPILER", self["kokkos"].kokkos_cxx))
            args.append(self.define("CUDAToolkit_ROOT", spec["cuda"].prefix))
        return args

    # ---- tests -----------------------------------------------------------------------------------
    # install time (spack install --test=root): ctest via CMakePackage's check() when +tests, then
    # the consumer below; stand-alone (spack test run attnbwd): the consumer and the CLI.

    def consumer_cmake_args(self, source_dir, build_dir):
        """Configure arguments for tests/install built against this installation."""
        spec = self.spec
        prefixes = [self.prefix, spec["kokkos"].prefix, spec["kokkos-kernels"].prefix]
        if spec.satisfies("+cuda"):
            prefixes.append(spec["cuda"].prefix)
            cxx = self["kokkos"].kokkos_cxx
        else:
            cxx = os.environ.get("CXX", "c++")
        return [
            "-S",
            source_dir,
            "-B",
            build_dir,
            self.define("CMAKE_BUILD_TYPE", "Release"),
            self.define("CMAKE_PREFIX_PATH", [str(p) for p in prefixes]),
            self.define("CMAKE_CXX_COMPILER", cxx),
        ]

    @staticmethod
    def have_gpu():
        return os.path.exists("/dev/nvidia0")

    def build_and_run_consumer(self, source_dir, build_dir):
        cmake = self.spec["cmake"].command
        cmake(*self.consumer_cmake_args(source_dir, build_dir))
        cmake("--build", build_dir)
        if self.spec.satisfies("+cuda") and not self.have_gpu():
            raise SkipTest("built against the install; not run: no GPU here")
        consumer = Executable(join_path(build_dir, "attnbwd_consumer"))
        out = consumer(output=str.split, error=str.split)
        assert "PASSED" in out, "the consumer reported a mismatch"

    @run_after("install")
    def cache_consumer_sources(self):
        cache_extra_test_sources(self, [join_path("tests", "install")])

    @run_after("install")
    @on_package_attributes(run_tests=True)
    def check_consumer(self):
        """install-time: build tests/install against the new install and run it"""
        source = join_path(self.stage.source_path, "tests", "install")
        try:
            self.build_and_run_consumer(source, join_path(self.stage.path, "consumer-build"))
        except SkipTest as e:
            print(f"attnbwd: consumer {e}")

    def test_consumer(self):
        """find_package(attnbwd) from a consumer project, one op checked against a double loop"""
        source = join_path(str(self.test_suite.current_test_cache_dir), "tests", "install")
        self.build_and_run_consumer(source, join_path(os.getcwd(), "consumer-build"))

    def test_cli(self):
        """the installed attnbwd tool lists its ops"""
        cli = which(join_path(self.prefix.bin, "attnbwd"))
        out = cli("list", output=str.split, error=str.split)
        for op in ("out_proj_backward", "gqa_rope_backward", "vision_mha_norm_backward"):
            assert op in out, f"attnbwd list does not name {op}"
