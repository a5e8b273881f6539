"""Build hook for the optional C kernel ``netparity._fastvec`` (everything else is in pyproject.toml).

The kernel computes a tensor's capture statistics in one memory pass (see src/netparity/_fastvec.c).
It is optional: where no C compiler is available the build skips it and capture uses NumPy
passes, which give the same numbers more slowly.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "netparity._fastvec",
            sources=["src/netparity/_fastvec.c"],
            extra_compile_args=["-O3", "-std=gnu99", "-pthread"],
            extra_link_args=["-pthread"],
            optional=True,
        )
    ]
)
