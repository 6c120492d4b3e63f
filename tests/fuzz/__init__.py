"""Fuzz / property suite (issue #11): hostile arguments to the public API and damaged files.

Every case must end in a result or a ``KstoreError``; no key outside the dataset's prefix is
touched; a failed write leaves the store unchanged; nothing crashes the interpreter (the
damaged-file cases, which exercise Arrow's C++ Parquet reader, run in a subprocess).

Budget: a few hundred cases per test by default (about a minute of the default suite);
``KSTORE_FUZZ_EXAMPLES=5000`` runs 5000 cases per fuzz test.
"""
