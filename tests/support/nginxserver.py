"""nginx for the tests: Debian's ``nginx`` started by the harness on 127.0.0.1, in front of
several ``regdev serve --http --stateless`` processes, round-robin, with no sticky routing.

Where nginx is not installed, :func:`started` raises :class:`pgserver.Missing` with one line
saying so and the command that installs it; the tests skip with it, except in CI
(``CI=true``), where they fail.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx2

from support.pgserver import Missing, free_port

INSTALL = "apt-get install nginx"

CONFIG = """
daemon off;
master_process on;
worker_processes 1;
pid {folder}/nginx.pid;
error_log {folder}/error.log warn;
{user}
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {folder}/body;
    proxy_temp_path {folder}/proxy;
    fastcgi_temp_path {folder}/fastcgi;
    uwsgi_temp_path {folder}/uwsgi;
    scgi_temp_path {folder}/scgi;
    upstream regdev {{
{servers}
        keepalive 32;
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://regdev;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $http_host;
            proxy_buffering off;
            proxy_read_timeout 120s;
            proxy_next_upstream error timeout;
        }}
    }}
}}
"""


@contextlib.contextmanager
def started(backends: Sequence[int], port: int | None = None) -> Iterator[str]:
    """nginx on ``port`` (None: a free one) of 127.0.0.1, round-robin over ``backends``
    (ports of 127.0.0.1); yields its base URL (``http://127.0.0.1:PORT``); stopped after.

    Raises:
        Missing: nginx is not installed (the message says how to install it).
    """
    binary = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx")
                                       else None)
    if binary is None:
        raise Missing(f"nginx is not installed (no nginx on PATH nor /usr/sbin/nginx); install "
                      f"it with: {INSTALL}")
    folder = Path(tempfile.mkdtemp(prefix="regdev-nginx-"))
    os.chmod(folder, 0o777)  # nginx's workers (a user of their own under root) write here
    port = port or free_port()
    servers = "\n".join(f"        server 127.0.0.1:{each} max_fails=1 fail_timeout=5s;"
                        for each in backends)
    user = "user nobody nogroup;" if os.geteuid() == 0 else ""
    (folder / "nginx.conf").write_text(CONFIG.format(folder=folder, user=user,
                                                     servers=servers, port=port))
    process = subprocess.Popen([binary, "-c", str(folder / "nginx.conf"), "-p", str(folder)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise AssertionError(f"nginx stopped: {process.stderr.read().decode()}"  # type: ignore[union-attr]
                                     f"{(folder / 'error.log').read_text()}")
            try:
                httpx2.get(url + "/", timeout=5)
                break
            except httpx2.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield url
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGQUIT)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(folder, ignore_errors=True)
