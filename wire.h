/*
 * wire.h - builds the running daemon from the configuration: the scheduler,
 * the registry, the dispatcher, the journal and the HTTP API, and connects
 * each one's hooks to the others.  main.c owns the process; wire.c owns the
 * parts.
 */
#ifndef RETRYD_WIRE_H
#define RETRYD_WIRE_H

#include <stddef.h>
#include <stdint.h>

struct wire;
struct jrnl;

/* Starts every part; listen_fd is the bound HTTP socket.  NULL with err. */
struct wire *wire_start(int listen_fd, char *err, size_t errlen);
/* The live configuration changed (SIGHUP). */
void	wire_reloaded(struct wire *w);
/* Drain within grace_ms, stop everything, free w. */
void	wire_stop(struct wire *w, int64_t grace_ms);
/*
 * The journal as the daemon opens it (retryd --recover); NULL with err
 * when it cannot be opened, NULL with err "" when the journal is off.
 */
struct jrnl *wire_journal(char *err, size_t errlen);

#endif
