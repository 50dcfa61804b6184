"""The wire protocol's version, kept apart from the package version.

It is carried in every message header (``"v"``) and checked at HELLO: a peer
speaking another version is refused with a message naming both. Bump it on any
change to the message layout in :mod:`aioenv.wire.protocol`.
"""

PROTOCOL_VERSION: int = 6
"""The version of the wire protocol this package speaks.

6: every message of a server to a client carries its mark ("mk"), no "mark" events; a Box's bound that every
element shares is described as one value (a 0-d array), and a header's values' large arrays may travel as frames
("s", extension 6); 5: a batched info's numeric columns travel as raw arrays ("bcol"); 4: clients acknowledge a
server's "mark" events ("ack"); 3: "blk" entries.
"""
