#!/usr/bin/python3
"""Run inside a test host (docker exec -i HOST python3 - ARGS < tls_probe.py): how a server answers a client.
   tls_probe.py HOST PORT plain                # plain HTTP GET /version
   tls_probe.py HOST PORT tls CA [CERT KEY]    # TLS, the server checked against CA, with or without a client certificate
Prints one line: "answered <status line> <start of the body>" or "refused <error type> <error>"."""
import socket
import ssl
import sys

host, port, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
request = f"GET /version HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()
try:
    sock = socket.create_connection((host, port), timeout=5)
    if mode == "tls":
        ctx = ssl.create_default_context(cafile=sys.argv[4])
        if len(sys.argv) > 6:
            ctx.load_cert_chain(sys.argv[5], sys.argv[6])
        sock = ctx.wrap_socket(sock, server_hostname=host)
    sock.sendall(request)
    data = b""
    while True:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    print("answered", head.split(b"\r\n")[0].decode(errors="replace"), body[:80])
except Exception as e:  # the answer is the point: any failure is reported, not raised
    print("refused", type(e).__name__, e)
