# Varnish in front of docsrv, purged by key: a starting point (Debian: varnish, varnish-modules).
#
# docsrv names what each reply shows in Surrogate-Key (docs/operations.md, "Purge keys");
# the xkey vmod indexes a cached object by the keys of its own xkey header, so they are copied
# there. `docsrv snapshot diff OLD NEW --purge http://<this varnish>/ --dialect varnish-xkey`
# sends PURGE requests whose xkey-purge header lists keys; only the purgers below may.
#
# docsrv answers only Host headers it knows: in front of it on a real hostname, start it with
# --public-url https://<that hostname> (its links are then built from it) or
# --allowed-host <that hostname>; otherwise every request is "400 Invalid Host header.".
vcl 4.1;

import xkey;

backend docsrv {
    .host = "127.0.0.1";
    .port = "8000";
}

acl purgers {
    "127.0.0.1";
    "::1";
}

sub vcl_recv {
    if (req.method == "PURGE") {
        if (client.ip !~ purgers) {
            return (synth(403, "Forbidden"));
        }
        if (!req.http.xkey-purge) {
            return (synth(400, "No xkey-purge header"));
        }
        set req.http.n-gone = xkey.purge(req.http.xkey-purge);
        return (synth(200, "Invalidated " + req.http.n-gone + " objects"));
    }
    if (req.method != "GET" && req.method != "HEAD") {
        return (pass);
    }
    # docsrv's replies are public and the same for every client but by the headers in Vary.
    unset req.http.Cookie;
    unset req.http.Authorization;
    return (hash);
}

sub vcl_backend_response {
    if (beresp.http.Surrogate-Key) {
        set beresp.http.xkey = beresp.http.Surrogate-Key;
    }
}

sub vcl_deliver {
    unset resp.http.xkey;
}
