"""The browser test's three cells through the Jupyter kernel protocol, with
jupyter_client (#45 item 1): run inside a workstation with its own Python,

    python kernel_cells.py OUT_DIR

it starts an ipykernel (the image's `python3` kernelspec) with jupyter_client's
KernelManager, runs each cell as a notebook does (execute_request on the shell
channel, output from iopub), and prints one JSON object on stdout:
{"cells": [{"code": ..., "status": "ok", "text": "..."}], "seconds": ...}.
Exits 1 when a cell does not finish in time or the kernel dies.
"""
import json
import sys
import time

from jupyter_client.manager import start_new_kernel

CELLS = [
    "import torch; torch.__version__",
    "!imgctl verify --level quick",
    "!imgctl train-demo --preset tiny --device cpu --steps 30 --out {out}",
]


def main():
    out = sys.argv[1]
    t0 = time.monotonic()
    km, kc = start_new_kernel(kernel_name="python3", startup_timeout=120)
    results = []
    try:
        for code in CELLS:
            code = code.format(out=out)
            texts = []

            def hook(msg, texts=texts):
                kind, content = msg["msg_type"], msg["content"]
                if kind == "stream":
                    texts.append(content["text"])
                elif kind in ("execute_result", "display_data"):
                    texts.append(content["data"].get("text/plain", "") + "\n")
                elif kind == "error":
                    texts.append("\n".join(content["traceback"]) + "\n")

            reply = kc.execute_interactive(code, timeout=600, output_hook=hook)
            results.append({"code": code, "status": reply["content"]["status"], "text": "".join(texts)})
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    print(json.dumps({"cells": results, "seconds": round(time.monotonic() - t0, 1)}))


if __name__ == "__main__":
    main()
