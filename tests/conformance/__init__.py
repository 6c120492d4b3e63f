"""The conformance suite: one matrix every driver must pass, the source data as the oracle.

Every driver that reads or writes kstore datasets (eager ``read_dataset`` / ``read_table``
/ ``iter_dataset``, Dask on threads and on a ``distributed.LocalCluster``, Spark
``ks.read_dataset`` / ``spark.read.format("kstore")`` / ``ks.store_dataset`` /
``df.write.format("kstore")``) runs the same cases (``matrix.py``):

* dtypes: every numeric type (int8..int64, uint64, float32/64 with NaN, +-inf and -0.0,
  decimal(38,10) and decimal(10,2)), bool and ints with nulls, strings with unicode and
  ``/``, binary with non-UTF-8 bytes, date / timestamp / timestamp_ntz at 0001-01-01 and
  9999-12-31, lists, structs, categoricals;
* partitioning on 0, 1 or 2 columns with values that need quoting;
* predicates: every operator, nulls, DNF, partition / indexed / plain columns, each pushed
  to kstore's planner (``predicates``) and evaluated by the engine (pandas / Dask masks,
  Spark ``.filter``), with the engine's own NaN semantics;
* projections, ``columns=[]`` included;
* DataFrame reuse: unions, self-joins and repeated actions of one DataFrame;
* column mapping (#33): a dataset whose files hold every data column under another name
  (``rename_columns``, indexed columns too) and a dropped column, read by every reader.

Expected answers are never written down: ``oracle.py`` evaluates each case on the source
rows (``matrix.source_table()``). ``drivers.py`` holds one adapter per engine (kartothek's
``io/testing`` does the same with a driver fixture). What an engine cannot represent is
refused before anything is written; ``refusals.py`` lists every such refusal and
``test_refusals.py`` asserts each. ``KSTORE_CONFORMANCE_FULL=1`` runs the full matrix
(every reader on every layout, every writer read by every reader, more random predicates).
"""
