"""Only for the five optional C helpers; everything else is in pyproject.toml.

storage/_record_walk.c is the per-record half of the produce-path LogValidator;
protocol/_produce_codec.c the Produce request decoder and response encoder (protocol/fast_codecs.py);
storage/_write_window.c the mapping through which an active segment without a descriptor is
appended to (storage/file_records.py); broker/_request_stats.c the per-request histograms of
the request metrics (broker/metrics.py); broker/_tls_read.c the read of TLS connections' plaintext,
every whole record in one call (broker/network.py's FastSSLObject). All are optional: when they do not build (no compiler
or Python headers), the install still succeeds, storage/log_validator.py runs the same walk
in Python, such appends open and close the file each time, and the metrics, the Produce codec and TLS reads use their Python
references, each slower.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("storage._record_walk", ["storage/_record_walk.c"], optional=True,
                             extra_compile_args=["-O3"]),
                   Extension("protocol._produce_codec", ["protocol/_produce_codec.c"], optional=True,
                             extra_compile_args=["-O2"]),
                   Extension("storage._write_window", ["storage/_write_window.c"], optional=True,
                             extra_compile_args=["-O2"]),
                   Extension("broker._request_stats", ["broker/_request_stats.c"], optional=True,
                             extra_compile_args=["-O2"]),
                   Extension("broker._tls_read", ["broker/_tls_read.c"], optional=True,
                             extra_compile_args=["-O2"])])
