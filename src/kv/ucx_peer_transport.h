#pragma once
// The peer transport (peer_transport.h) over UCX's UCP API (Debian's UCX 1.13, libucx-dev):
// a server listening on a TCP socket address, clients connecting to it, and the frames of
// peer_frames.h carried as Active Messages. UCX picks the wire for each connection -- TCP, or
// RDMA where the hosts have it -- behind the same calls (the connection itself is always made
// over a TCP socket).
//
//   client                                  server (one progress thread)
//   get(keys) --AM "request" (eager)-->     lookup(keys, values)
//             <--AM "response"--            header: the response head (lengths); data: the
//                                           values, sent from the lookup's strings as an iov
//   values[i] <- received in place (rendezvous) or copied out (eager, small)
//
// Why Active Messages rather than tags: a response's size is known only to the server, and an AM
// hands the client the head (every value's length) before the data moves, so the client sizes
// each value's string and receives the values straight into them -- no receive buffer posted in
// advance at a guessed size (tag receives), no copy out of one big buffer. The reply goes back on
// the endpoint the request came in on (UCP_AM_SEND_FLAG_REPLY), so the server keeps no client
// table beyond the endpoints it must close.
//
// Why an iov on the server: the lookup's values are separate strings (2 MiB blocks a copy out of
// the pool put there); an iov datatype sends them as they are, where one contiguous buffer would
// cost a second copy of up to kMaxPeerResponseBytes per response.
//
// Threading. The server owns a UCP context, a worker and one progress thread that does all of
// its UCX calls and the lookups, sleeping on the worker's event fd when idle; the destructor
// wakes it (ucp_worker_signal), closes every endpoint and joins it. Lookups run one at a time,
// in arrival order. A client owns its own context and worker and drives them on the thread that
// calls get() -- no thread of its own.

#include <chrono>
#include <memory>
#include <string>

#include "core/status.h"
#include "kv/peer_transport.h"

namespace strata::kv {

// The Active Message ids of the two frames (peer_frames.h). Small: UCX sizes each worker's
// handler table by the largest id registered.
inline constexpr unsigned kPeerRequestAmId = 37;
inline constexpr unsigned kPeerResponseAmId = 38;

// Listens on bind_host:port (port 0: any free port; address() says which) and answers with
// lookup. InvalidArgument for an address that does not resolve; Unavailable / Internal when UCX
// cannot start or listen (the port taken, say).
Result<std::unique_ptr<PeerServer>> start_ucx_peer_server(const std::string& bind_host, int port,
                                                          PeerBlockLookup lookup);

// Connects to a server's address() ("host:port") and makes one empty round trip, so a peer that
// is not there (nothing listening, or not answering within timeout) is an error here
// (Unavailable) rather than at the first get. timeout bounds that and every get().
// The client keeps its connection until destroyed; once the connection fails (the peer died or
// closed it) every get() is Unavailable at once: connect again. A get that times out leaves the
// connection as it was: its answer, if it comes, is dropped. get() receives into the buffers of
// the strings `values` holds on entry (blocks are one size): pass the same vector back each time,
// and a get allocates nothing after the first -- a fresh 2 MiB string costs its page faults.
Result<std::unique_ptr<PeerClient>> connect_ucx_peer(const std::string& address,
                                                     std::chrono::milliseconds timeout);

}  // namespace strata::kv
