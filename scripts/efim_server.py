"""Starting `efim serve` from the Python scripts and tests (soak.py, scaleout.py, the HAProxy
and Kubernetes tests): the process on a port the kernel picks, its log drained."""
import re
import subprocess
import sys
import threading
import urllib.error
import urllib.request


def start(efim, model, flags=(), what="efim serve"):
    """`efim serve MODEL --port 0 FLAGS...`: (process, port) once it serves. Its stderr is read
    until the "serving ... on http://H:P" line and then drained by a thread, so a long log never
    blocks it. Exits with a message when the process ends before serving."""
    p = subprocess.Popen([efim, "serve", model, "--port", "0", *flags],
                         stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    line = p.stderr.readline()
    while "serving" not in line:
        line = p.stderr.readline()
        if not line:
            sys.exit(f"{what} did not start (exit {p.wait()})")
    threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
    return p, int(re.search(r"http://[^:]+:(\d+)", line).group(1))


def http_get(url, timeout=5):
    """(status, body); an HTTP error gives its status and body, no connection (0, "")."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return 0, ""
