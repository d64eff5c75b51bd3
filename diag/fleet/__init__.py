"""A fleet on a Dask cluster (``analyze --cluster``): the pipeline's input groups
(:mod:`diag.sources.groups`) read by the workers with :func:`diag.pipeline.read_group`, their
compact facts judged here by the same last stages (:func:`diag.pipeline.judge_groups`), and
the evidence lines read where the files are (:mod:`diag.fleet.cluster`). A local analysis of
many files runs the same groups in this process (:func:`diag.pipeline.analyze`).
"""
