"""Only for the one optional C helper; everything else is in pyproject.toml.

storage/_record_walk.c is the per-record half of the produce-path LogValidator. It is
optional: when it does not build (no compiler or Python headers), the install still
succeeds and storage/log_validator.py runs the same walk in Python, slower.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("storage._record_walk", ["storage/_record_walk.c"], optional=True,
                             extra_compile_args=["-O3"])])
