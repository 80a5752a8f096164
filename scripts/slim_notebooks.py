"""Drop the embedded images from executed notebooks before they are committed under results/.

Each figure is also saved as a file by the notebook that drew it (its run folder's figures/), so the
committed copy keeps the code, the text outputs and a line naming where the figure is; the images
(about 2 MB a notebook) would otherwise crowd the tree past what a device run can carry.
Usage: python scripts/slim_notebooks.py results/.../notebooks/roofline.ipynb ...
"""
import json
import sys
from pathlib import Path

NOTE = "[image left out of the committed notebook: the figures/ folder of its run holds each figure]"


def slim(path: Path) -> int:
    """Remove every image/* output of `path` in place; returns how many were removed."""
    nb = json.loads(path.read_text())
    removed = 0
    for cell in nb.get("cells", []):
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            images = [k for k in data if k.startswith("image/")]
            for k in images:
                del data[k]
            if images:
                removed += len(images)
                data["text/plain"] = NOTE
    if removed:
        path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    return removed


if __name__ == "__main__":
    for name in sys.argv[1:]:
        print(f"{name}: {slim(Path(name))} images left out")
