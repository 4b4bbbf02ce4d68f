"""`moto_server` with S3's conditional writes made atomic, as they are on S3.

Moto checks `If-Match` / `If-None-Match` on a PUT (and `If-Match` on a DELETE), then writes,
without a lock, in a threaded server: two conditional PUTs on one key can both pass the check.
On a loaded machine that let two instances take one bucket lease
(s3::the_bucket_lease_has_one_holder_and_passes_on_when_it_lapses: "two instances took one
lease"). Lance's commits rely on the same check. Real S3 decides a conditional write
atomically; this runs the same server with each check-and-write under one lock.

Usage: <venv>/bin/python moto_atomic.py [moto_server arguments]
"""

import sys
import threading

from moto.s3.responses import S3Response
from moto.server import main

_CONDITIONAL_WRITES = threading.Lock()


def _atomic(method):
    def run(self, *args, **kwargs):
        with _CONDITIONAL_WRITES:
            return method(self, *args, **kwargs)

    return run


# PUT, conditional DELETE, and POST on a key (a multipart upload's completion checks
# If-None-Match). A moto without one of them fails here rather than run unguarded.
for _name in ("put_object", "delete_object", "_key_response_post"):
    setattr(S3Response, _name, _atomic(getattr(S3Response, _name)))

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
