/* SPDX-License-Identifier: MIT */
/*
 * server.h - kvpool-http's HTTP side: a gate (gate.h) accepting on the bound listen
 * sockets and handing connections to one libmicrohttpd daemon per address, the routes,
 * API keys, limits, and each request's life from its headers to the last byte of its
 * answer.
 *
 *   POST /v1/completions       OpenAI completions (stream: SSE)
 *   POST /v1/chat/completions  OpenAI chat        (501 until kvpoold has CHAT)
 *   POST /v1/messages          Anthropic Messages (501 until kvpoold has CHAT)
 *   POST /v1/messages/count_tokens, /tokenize, /detokenize (501 until kvpoold has TOKENIZE)
 *   GET  /v1/models, /v1/models/{id}, /health, /metrics
 *
 * A generation waits without an HTTP thread: the connection is suspended (libmicrohttpd)
 * until the backend thread has something for it (the first event, then each token of a
 * stream) and resumes it.  A client that goes away cancels its request in kvpoold: seen
 * by the HTTP library while a response is being sent, and by the backend thread (a
 * hang-up on the socket) while the connection is suspended.
 *
 * Threads: the gate thread accepts; the library's HTTP threads run the handlers; the
 * backend thread runs the job ops; one small thread fetches kvpoold's status report for
 * /metrics; the caller's thread calls the functions below.
 */
#ifndef KVP_IPC_HTTP_SERVER_H
#define KVP_IPC_HTTP_SERVER_H

#include <stddef.h>

#include "ipc/http/backend.h"
#include "ipc/http/config.h"
#include "ipc/http/keys.h"
#include "ipc/http/listen.h"

struct kvp_http_server;

/**
 * kvp_http_server_new() - the routes and their state, not yet listening
 * @cfg, @keys, @be: borrowed for the server's life (@keys with no key = no API keys)
 * Return: 0 or -errno (@err says why).
 */
int kvp_http_server_new(struct kvp_http_server **out, const struct kvp_http_config *cfg,
			const struct kvp_http_keys *keys, struct kvp_http_backend *be, char *err,
			size_t cap);

/**
 * kvp_http_server_listen() - serve HTTP on @l's socket
 * Takes ownership of @l->fd (set to -1); @l keeps its unix path for removal.
 * Return: 0 or -errno (@err says why).
 */
int kvp_http_server_listen(struct kvp_http_server *srv, struct kvp_http_listener *l, char *err,
			   size_t cap);

/*
 * Stop taking work: the listen sockets close, requests whose headers come afterwards (on
 * connections already open) get 503; requests received before go on, to the backend too.
 */
void kvp_http_server_stop_accepting(struct kvp_http_server *srv);

/* Requests from their headers until their response is sent (or their connection gone). */
unsigned int kvp_http_server_open(struct kvp_http_server *srv);

/*
 * Stop serving and free.  Call after kvp_http_backend_free() (every generation has
 * ended, so no connection is suspended).  NULL is ok.
 */
void kvp_http_server_free(struct kvp_http_server *srv);

#endif /* KVP_IPC_HTTP_SERVER_H */
