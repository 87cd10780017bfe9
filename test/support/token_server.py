#!/usr/bin/env python3
"""A token service for the registry push tests: distribution's `auth: token` protocol (as Docker Hub, GHCR and Harbor
speak it). GET /token?service=S&scope=repository:NAME:pull,push with HTTP Basic USER:PASSWORD answers
{"token": JWT}, the JWT signed RS256 with KEY and carrying CERT in x5c (the registry trusts CERT as its root bundle).
Wrong credentials: 401. Serves on 127.0.0.1, a port of the kernel's choice, written to PORT_FILE once listening.

usage: token_server.py PORT_FILE KEY CERT ISSUER SERVICE USER PASSWORD
"""
import base64
import http.server
import json
import os
import subprocess
import sys
import time
import urllib.parse

port_file, key, cert, issuer, service, user, password = sys.argv[1:8]
der = subprocess.run(["openssl", "x509", "-in", cert, "-outform", "DER"], check=True, capture_output=True).stdout


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def token_for(subject, name, actions):
    header = {"typ": "JWT", "alg": "RS256", "x5c": [base64.b64encode(der).decode()]}
    now = int(time.time())
    claims = {"iss": issuer, "sub": subject, "aud": service, "exp": now + 300, "nbf": now - 10, "iat": now,
              "jti": b64url(os.urandom(12)), "access": [{"type": "repository", "name": name, "actions": actions}]}
    signing_input = b64url(json.dumps(header).encode()) + "." + b64url(json.dumps(claims).encode())
    signature = subprocess.run(["openssl", "dgst", "-sha256", "-sign", key], input=signing_input.encode(),
                               check=True, capture_output=True).stdout
    return signing_input + "." + b64url(signature)


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        url = urllib.parse.urlparse(self.path)
        query = urllib.parse.parse_qs(url.query)
        expected = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        if url.path != "/token" or self.headers.get("Authorization") != expected:
            self.send_response(401)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"errors": [{"code": "UNAUTHORIZED", "message": "bad credentials"}]}')
            return
        _, name, actions = query.get("scope", ["repository::"])[0].split(":", 2)
        body = json.dumps({"token": token_for(user, name, actions.split(","))}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt, *args):
        sys.stderr.write("token_server: " + fmt % args + "\n")


server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
with open(port_file + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(port_file + ".tmp", port_file)
server.serve_forever()
