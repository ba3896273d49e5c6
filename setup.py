"""Only for the two optional C helpers; everything else is in pyproject.toml.

storage/_record_walk.c is the per-record half of the produce-path LogValidator;
storage/_write_window.c the mapping through which an active segment without a descriptor is
appended to (storage/file_records.py). Both are optional: when they do not build (no compiler
or Python headers), the install still succeeds, storage/log_validator.py runs the same walk
in Python and such appends open and close the file each time, slower.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("storage._record_walk", ["storage/_record_walk.c"], optional=True,
                             extra_compile_args=["-O3"]),
                   Extension("storage._write_window", ["storage/_write_window.c"], optional=True,
                             extra_compile_args=["-O2"])])
