# A stand-in agent gateway for the service tests: an HTTP server on
# 127.0.0.1:PORT (inside its session) that reports who it is and tries
# what the test asks, answering "ok:..." or "err:...".
import http.server, os, socket, sys, urllib.parse

STATE = os.path.join(os.environ["HOME"], "state.txt")

class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        u = urllib.parse.urlparse(self.path)
        q = urllib.parse.unquote(u.query)
        try:
            if u.path == "/whoami":
                out = "ok:%d %s" % (os.getuid(), os.environ["HOME"])
            elif u.path == "/write":
                with open(STATE, "w") as f:
                    f.write(q)
                out = "ok:"
            elif u.path == "/state":
                out = "ok:" + open(STATE).read()
            elif u.path == "/read":
                out = "ok:" + open(q).read()
            elif u.path == "/connect":
                host, port = q.rsplit(":", 1)
                socket.create_connection((host, int(port)), timeout=2).close()
                out = "ok:connected"
            else:
                out = "err:unknown " + u.path
        except Exception as e:
            out = "err:%s" % e
        b = out.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)

print("listening", flush=True)
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
