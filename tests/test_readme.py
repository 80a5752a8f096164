from perflab.data import PROJECT_ROOT
from perflab.report import markdown


def test_readme_results_block_matches_the_result_files():
    """README numbers come from committed files: regenerate and compare (perflab report --readme fixes it)."""
    text = (PROJECT_ROOT / "README.md").read_text()
    block = text[text.index(markdown.BEGIN) + len(markdown.BEGIN):text.index(markdown.END)]
    assert block == "\n" + markdown.markdown()


def test_readme_starts_with_the_two_commands():
    text = (PROJECT_ROOT / "README.md").read_text()
    head = text[:text.index("## Measured results")]
    assert "make roofline" in head and "make test" in head
