"""The instruction table and the formats every layer reads.

``isa`` (the rows every layer is derived from), ``tilecfg`` (the TILECFG image and its fault rules),
``bf16`` and ``layout`` (operand formats and interleaved layouts), ``_memory`` (memory operand bounds).
Nothing is imported here, so loading one of them costs only its own imports.
"""
