/* A forked child's connections. The child shares its parent's sockets: a frame it wrote would land among the
 * parent's, and the server would take both for one program out of step. The real driver fails every call of a
 * child whose parent had initialised CUDA, and so does the stand-in: the child closes its copies of the sockets
 * (the parent's stay open: no shutdown, nothing sent) and every call answers CUDA_ERROR_NOT_INITIALIZED.
 *
 * Its locks, the connections' among them, were made afresh by fork_locks.c's handler, which runs first (registered
 * at load time, this one at the first cuInit). Only the thread that forked goes on, so nothing else touches the
 * connections while this runs. */
#include <pthread.h>
#include <unistd.h>

#include "conn.h"
#include "rgpu_log.h"

static void forked_child(void)
{
    for (int i = 0; i < RGPU_MAX_SERVERS; i++) {
        struct rgpu_connection *c = &rgpu_conns[i];
        struct rgpu_connection *was = conn_cur;
        conn_cur = c;
        conn_links_close(); /* (a child's copy: the parent's threads are left alone, the sockets closed) */
        conn_cur = was;
        if (c->fd >= 0)
            close(c->fd);
        c->fd = -1;
        c->state = -1;
        c->failure = CUDA_ERROR_NOT_INITIALIZED;
        c->in_pos = c->in_len = 0;
        c->batch_len = 0, c->batch_calls = 0, c->held_sync = 0;
    }
    conn_connect_forked();
}

static void watch(void)
{
    if (pthread_atfork(NULL, NULL, forked_child))
        rgpu_log(RGPU_LOG_WARN, "cannot watch for fork(): a forked child's CUDA calls would share the connection");
}

/* Called before rgpu_connect takes its lock: a child forked while another thread holds it has the handler, which
 * makes it afresh. */
void conn_fork_watch(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, watch);
}
