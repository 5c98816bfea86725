// Private: listening sockets that refuse a port another process already listens on.
#ifndef CUVIL_SERVER_SRC_EXCLUSIVE_LISTENER_H_
#define CUVIL_SERVER_SRC_EXCLUSIVE_LISTENER_H_

#include <sys/socket.h>

namespace cuvil {

// Socket options for an httplib listener: SO_REUSEADDR only. httplib's default sets SO_REUSEPORT,
// with which a second server started on a port in use binds it too and the kernel splits the
// connections between the two processes — requests silently reach whichever server, with its own
// models and statistics, instead of the second start failing with "address in use" as Triton's
// does. SO_REUSEADDR still lets a restarted server bind while old connections are in TIME_WAIT.
// Thread-safe.
inline void SetExclusiveListenerOptions(int socket) {
  int yes = 1;
  ::setsockopt(socket, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
}

}  // namespace cuvil

#endif  // CUVIL_SERVER_SRC_EXCLUSIVE_LISTENER_H_
