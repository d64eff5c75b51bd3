"""Analysis by independent input groups: bounded memory for fleets, the same report.

* :mod:`diag.fleet.groups`: the inputs cut into groups that give the same runs alone;
* :mod:`diag.fleet.partial`: one group read into compact facts (no event tables kept);
* :mod:`diag.fleet.merge`: the cross-run steps over every group's facts, one ``Report``;
* :mod:`diag.fleet.cluster`: the same groups as Dask tasks (``analyze --cluster``).
"""
