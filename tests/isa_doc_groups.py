"""What docs/isa.md's instruction table links for each group of rows: emulator, kernel, trap case, tests.

The one place these names live (a moved test or a renamed kernel function is edited here only).
pyamx/table/generate.py makes the table from the rows of pyamx/table/isa.py: each row's own cells
(mnemonic, kind, kernel group, CPUID feature, encoding) from the row, the rest from its group here:
the action of a config or memory row, the kind of a row instruction, the kind and kernel group of a
dot product. A new instruction of an existing group needs no edit here; a new group needs one
entry in ``GROUPS`` (the generator stops, naming it, until it has one). Tests are named by their
path under tests/; tests/table/test_isa.py checks that every function and test named here exists.
"""

from __future__ import annotations

from typing import Dict, Tuple

MACHINE = "`pyamx.emulator.machine.TileMachine.{name}`"
FUNCTION = "`pyamx.emulator.{name}`"
DOT_KERNELS = "[`pyamx_tdp`, `pyamx_dp_oneshot`](../csrc/kernels.c)"
LOAD_KERNELS = "[`pyamx_load_tile`, `pyamx_check_memory_operand`, `load_tile`](../csrc/kernels.c)"
MEMORY_GUARD_TESTS = ("cpu/test_native_guards.py::test_c_memory_guard_agrees_with_the_emulator_rule_on_extreme_operands",
                      "cpu/test_native_interrupts.py::test_an_exception_at_every_call_boundary_leaves_no_stale_config_"
                      "and_no_stray_access")
DOT_GUARD_TEST = "cpu/test_native_guards.py::test_c_dot_guard_agrees_with_check_dot_product"
FLOAT_TRAP_TEST = "trap/test_trap.py::test_float_dot_products_match_the_reference_bit_for_bit"
ROW_TESTS = ("emulator/test_rows.py::test_every_selector_matches_the_reference",
             "emulator/test_rows.py::test_start_row_resets_and_the_movrow_option_keeps_it",
             "cpu/test_rows_native.py::test_the_built_row_kernel_issues_the_rows_encoding_on_every_tile_then_stores_zmm0",
             "cpu/test_rows_native.py::test_the_built_imm8_kernel_issues_the_imm_encoding_for_every_tile_and_row_below_16",
             "cpu/test_rows_native.py::test_the_native_machine_refuses_an_extension_the_cpu_lacks_before_anything_runs")
MOVRS_TESTS = ("emulator/test_rows.py::test_movrs_loads_equal_tileloadd_including_faults_and_start_row",
               "cpu/test_rows_native.py::test_the_built_movrs_loads_issue_the_encodings_on_every_tile",
               "cpu/test_rows_native.py::test_the_native_machine_refuses_an_extension_the_cpu_lacks_before_anything_runs")

#: group -> (emulator, native kernel, trap case, tests); ``{name}`` is the row's lower-case name
GROUPS: Dict[str, Tuple[str, str, str, Tuple[str, ...]]] = {
    "load-config": (MACHINE + ", `pyamx.table.tilecfg.parse_tilecfg`",
                    "[`pyamx_load_config`, `cfg_legal`](../csrc/kernels.c)", "`do_load_config`",
                    ("emulator/test_machine.py::test_ldtilecfg_gp_rules",
                     "cpu/test_c_guards.py::test_ldtilecfg_returns_e_gp_config_for_every_gp_rule_and_keeps_the_config",
                     "trap/test_trap.py::test_illegal_ldtilecfg_is_sigsegv")),
    "store-config": (MACHINE, "[`pyamx_store_config`](../csrc/kernels.c)", "`do_store_config`",
                     ("emulator/test_machine.py::test_sttilecfg_of_init_state_is_zero_and_tilerelease_returns_there",
                      "trap/test_trap.py::test_config_roundtrip_and_counts")),
    "release": (MACHINE, "[`pyamx_release_tiles`](../csrc/kernels.c)", "`state_init`",
                ("emulator/test_machine.py::test_sttilecfg_of_init_state_is_zero_and_tilerelease_returns_there",
                 "trap/test_trap.py::test_palette_zero_is_the_init_state")),
    "zero": (MACHINE, "[`pyamx_zero_tile`](../csrc/kernels.c)", "`trap_execute`",
             ("emulator/test_machine.py::test_tilezero_zeroes_the_whole_tile",
              "cpu/test_c_guards.py::test_register_numbers_out_of_range_return_e_ud_register",
              "trap/test_trap.py::test_ud_cases_die_with_sigill")),
    "load": (MACHINE + ", `pyamx.table._memory.row_offsets`", LOAD_KERNELS, "`do_load_tile`",
             ("emulator/test_machine.py::test_load_zeroes_row_tails_and_upper_rows",
              "emulator/test_machine.py::test_start_row_restarts_load_and_store_then_resets",
              "trap/test_trap.py::test_load_store_addressing_forms", *MEMORY_GUARD_TESTS)),
    "load-t1": (MACHINE, LOAD_KERNELS, "`do_load_tile`",
                ("emulator/test_machine.py::test_load_zeroes_row_tails_and_upper_rows",
                 "emulator/test_machine.py::test_load_store_ud_rules_and_bounds", *MEMORY_GUARD_TESTS)),
    "load-rs": (MACHINE, "[`pyamx_load_tile`, `pyamx_check_memory_operand`, `load_tile_movrs`](../csrc/kernels.c)",
                "`do_load_tile`", MOVRS_TESTS),
    "load-rs-t1": (MACHINE, "[`pyamx_load_tile`, `pyamx_check_memory_operand`, `load_tile_movrs`](../csrc/kernels.c)",
                   "`do_load_tile`", MOVRS_TESTS),
    "store": (MACHINE, "[`pyamx_store_tile`, `pyamx_check_memory_operand`, `store_tile`](../csrc/kernels.c)",
              "`do_store_tile`",
              ("emulator/test_machine.py::test_store_writes_only_configured_bytes",
               "emulator/test_machine.py::test_store_refuses_read_only_buffers",
               "trap/test_trap.py::test_load_store_addressing_forms", *MEMORY_GUARD_TESTS)),
    "dot-pairs/bf16": (FUNCTION + ", `pyamx.emulator.dot.float_dot`", DOT_KERNELS, "`dp_float_rows`",
                       ("emulator/test_emulator_exact.py::test_every_input_class_matches_reference",
                        "emulator/test_machine.py::test_dot_product_ud_rules",
                        "cpu/test_crosscheck.py::test_oneshot_tdpbf16ps_matches_emulator", FLOAT_TRAP_TEST, DOT_GUARD_TEST)),
    "dot-pairs/fp16": (FUNCTION + ", `pyamx.emulator.fp16.widen_fp16_bits`", DOT_KERNELS, "`dp_float_rows`",
                       ("emulator/test_formats.py::test_fp16_dot_product_matches_reference",
                        "emulator/test_formats.py::test_fp16_denormals_are_honoured",
                        "cpu/test_crosscheck.py::test_oneshot_fp16_matches_emulator", FLOAT_TRAP_TEST, DOT_GUARD_TEST)),
    "dot-quads/int8": (FUNCTION + ", `pyamx.emulator.instructions.tdpb_int8`, `pyamx.emulator.dot.integer_dot`",
                       DOT_KERNELS, "`dp_int8_rows`",
                       ("emulator/test_formats.py::test_int8_dot_products_match_reference_including_wraparound_and_extremes",
                        "emulator/test_machine.py::test_int8_machine_matches_reference",
                        "cpu/test_crosscheck.py::test_oneshot_int8_matches_emulator",
                        "trap/test_trap.py::test_int8_dot_products_match_the_reference_with_wraparound", DOT_GUARD_TEST)),
    "dot-complex/complex": (FUNCTION + ", `pyamx.emulator.complex_rows.fp16_operand`", DOT_KERNELS, "`complex_rows`",
                            ("emulator/test_complex.py::test_every_engine_matches_the_reference",
                             "emulator/test_complex.py::test_the_tile_machine_matches_the_reference",
                             "emulator/test_complex.py::test_the_row_encodes_as_clang_assembles_the_mnemonic", DOT_GUARD_TEST)),
    "dot-quads/fp8": (FUNCTION + ", `pyamx.emulator.instructions.fp8_dot`, `pyamx.emulator.fp8.block`",
                      DOT_KERNELS, "`trap_dp_fp8_rows`",
                      ("emulator/test_fp8.py::test_every_code_of_both_operands_matches_the_reference",
                       "emulator/test_fp8.py::test_hand_vectors_hold_for_the_reference_and_every_path",
                       "emulator/test_fp8.py::test_the_tile_machine_matches_the_reference_and_clears_the_rest",
                       "emulator/test_fp8.py::test_every_option_matches_the_reference",
                       "emulator/test_fp8.py::test_table_encodings_are_what_clang_assembles",
                       "emulator/test_fp8.py::test_native_refuses_without_amx_fp8_naming_the_feature")),
    "row": (MACHINE + ", `pyamx.emulator.rows.{name}`",
            "[`pyamx_tilerow`, `pyamx_tilerow_imm`, `row_state_enabled`](../csrc/kernels.c)", "`trap_do_row`",
            ROW_TESTS),
}
