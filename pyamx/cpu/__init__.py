"""The native side: what runs or asks the CPU itself.

``detect`` (is AMX usable here: reads and judges), ``_native_start`` (the permission, the child, the trap
mode: the actions, at the backend choice), ``native`` and ``_native_matmul`` (the AMX kernels'
Python face), ``_nativelib`` (the one loader of the compiled modules), ``trap`` (trap-and-emulate
control) and ``_runtime`` (the runtime report). Nothing is imported here: ``pyamx run`` loads ``trap``
without numpy, and ``detect`` must load without the backend it informs.
"""
