"""Which CMSIS-NN files a caller needs (generator/project/cmsis_nn_sources.py), on a small
tree written here, and on the real tree: what the driver needs links on every core
(tests/test_cmsis_nn_glue.py builds exactly that list)."""

from __future__ import annotations

from pathlib import Path

from generator.project.cmsis_nn_sources import definitions, needed_sources


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_definitions_are_names_with_a_body():
    code = ("int arm_a(int x);\nint arm_b(int (*f)(int), int y)\n{ return arm_a(y); }\n"
            "#define CALL arm_c(1)\n")
    assert definitions(code) == {"arm_b": "{ return arm_a(y); }"}


def test_the_closure_follows_sources_and_inline_headers_not_comments(tmp_path):
    root = _tree(tmp_path, {
        "Include/arm_nnsupportfunctions.h":
            "int arm_helper(int x);\nint arm_unused(void);\n"
            "static inline int arm_inline(int x) { return arm_helper(x); }\n",
        "Source/A/arm_top.c": "int arm_top(int x) { return arm_inline(x) + arm_mid(x); }\n",
        "Source/A/arm_mid.c": "/* arm_unused is not called */ int arm_mid(int x) { return x; }\n",
        "Source/B/arm_helper.c": "int arm_helper(int x)\n{\n  return x + 1;\n}\n",
        "Source/B/arm_unused.c": "int arm_unused(void) { return 0; }\n",
        "Source/B/arm_other.c": "int arm_other(void) { return arm_unused(); }\n",
    })
    assert needed_sources(root, ["// arm_other\nint f(void) { return arm_top(2); }"]) == [
        "Source/A/arm_mid.c", "Source/A/arm_top.c", "Source/B/arm_helper.c"]
    assert needed_sources(root, ["int g(void);"]) == []


def test_the_driver_needs_a_third_of_the_real_tree():
    from generator.accel.cmsis_nn import driver_sources
    from tests.test_cmsis_nn_glue import cmsis_nn_tree

    tree = cmsis_nn_tree()
    needed = driver_sources(tree)
    assert "Source/ConvolutionFunctions/arm_convolve_wrapper_s8.c" in needed
    assert "Source/SoftmaxFunctions/arm_softmax_s8.c" in needed
    assert not any("lstm" in rel or "svdf" in rel or rel.endswith("_s4.c") for rel in needed)
    assert 20 <= len(needed) <= len(list(tree.glob("Source/*/*.c"))) // 2
