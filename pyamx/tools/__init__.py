"""The tools around the library: the ``pyamx`` command and what its verbs run.

``cli`` (with ``_argtypes``, ``_files``), ``demo``, ``probe``, ``vectors`` (with ``_vector_tiles`` and the
operand generators of ``testing``), ``bench``, ``run`` (the preload launcher) and ``pytest_plugin``.
Nothing is imported here: ``pyamx run`` must start without numpy.
"""
