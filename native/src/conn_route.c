/* Several servers (RGPU_SERVER=hostA:port,hostB:port): one connection each, their devices numbered in that
 * order. Every call goes to one server, chosen from what the operation names (its spec, rgpu_op_route in
 * rgpu_ops.h): a device ordinal (then translated to the server's own), else a handle -- each handle a server
 * made is remembered with its server -- else a device address (the range table knows its context), else the
 * calling thread's current context. One connection failing fails the calls routed to it, never the others.
 *
 * What crosses servers is done here, by the client: copies between devices of different servers go through
 * host memory (rgpu_copy_across in memory.c), and a stream of one server waiting for an event of another waits
 * for it on the host (graph.c). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "conn.h"

struct rgpu_connection rgpu_conns[RGPU_MAX_SERVERS] = {
    [0 ... RGPU_MAX_SERVERS - 1] = {.lock = PTHREAD_MUTEX_INITIALIZER, .failure = CUDA_SUCCESS, .fd = -1,
                                    .next_id = 1, .max_frame = 64u << 20, .server_minor = 1}};
int rgpu_nservers = 1;

__attribute__((constructor)) static void fork_reset_connections(void) /* (fork_locks.h, one per connection) */
{
    for (int i = 0; i < RGPU_MAX_SERVERS; i++)
        rgpu_fork_reset(&rgpu_conns[i].lock);
}
__thread struct rgpu_connection *conn_cur = &rgpu_conns[0];
static __thread int t_forced = -1; /* rgpu_route_push's server, for calls that must go to one */

/* -- handles made by each server: open addressing, never shrinks (a handle is 8 bytes + 1) ------------------ */
static pthread_mutex_t map_lock = PTHREAD_MUTEX_INITIALIZER;
RGPU_FORK_RESET(map_lock, &map_lock)
static uint64_t *map_keys;
static uint8_t *map_server;
static size_t map_cap, map_n;

static size_t slot(uint64_t h, size_t cap)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return (size_t)h & (cap - 1);
}

/* 0, or -1 when out of memory, or -2 when another server made the same handle already. */
static int map_put_locked(uint64_t h, int server)
{
    if (2 * (map_n + 1) > map_cap) {
        size_t cap = map_cap ? 2 * map_cap : 1024;
        uint64_t *keys = calloc(cap, sizeof *keys);
        uint8_t *servers = calloc(cap, 1);
        if (!keys || !servers) {
            free(keys);
            free(servers);
            return -1;
        }
        for (size_t i = 0; i < map_cap; i++)
            if (map_keys[i]) {
                size_t j = slot(map_keys[i], cap);
                while (keys[j])
                    j = (j + 1) & (cap - 1);
                keys[j] = map_keys[i];
                servers[j] = map_server[i];
            }
        free(map_keys);
        free(map_server);
        map_keys = keys, map_server = servers, map_cap = cap;
    }
    size_t j = slot(h, map_cap);
    while (map_keys[j] && map_keys[j] != h)
        j = (j + 1) & (map_cap - 1);
    if (map_keys[j] && map_server[j] != (uint8_t)server)
        return -2;
    map_n += !map_keys[j];
    map_keys[j] = h;
    map_server[j] = (uint8_t)server;
    return 0;
}

static int map_get(uint64_t h)
{
    int server = -1;
    pthread_mutex_lock(&map_lock);
    if (map_cap) {
        size_t j = slot(h, map_cap);
        while (map_keys[j] && map_keys[j] != h)
            j = (j + 1) & (map_cap - 1);
        if (map_keys[j])
            server = map_server[j];
    }
    pthread_mutex_unlock(&map_lock);
    return server;
}

int rgpu_server_of_handle(uint64_t h) { return h ? map_get(h) : -1; }

/* -- devices: server i has devices [first[i], first[i + 1]) --------------------------------------------------- */
static int first[RGPU_MAX_SERVERS + 1];

void rgpu_set_server_devices(int server, int count)
{
    first[server + 1] = first[server] + count;
}

int rgpu_device_server(int dev, int *local)
{
    for (int s = 0; s < rgpu_nservers; s++)
        if (dev >= first[s] && dev < first[s + 1]) {
            *local = dev - first[s];
            return s;
        }
    return -1;
}

int rgpu_server_count(void) { return rgpu_nservers; }

int rgpu_server_of_ctx(uint64_t ctx) { return rgpu_nservers > 1 ? map_get(ctx) : 0; }

int rgpu_server_of_ptr(uint64_t ptr)
{
    uint64_t ctx;
    if (rgpu_nservers <= 1)
        return 0;
    return rgpu_ranges_ctx(ptr, &ctx) == 0 ? map_get(ctx) : -1;
}

int rgpu_route_push(int server)
{
    int prev = t_forced;
    t_forced = server;
    return prev;
}

void rgpu_route_pop(int prev) { t_forced = prev; }

static int current_server(void)
{
    int s = rgpu_server_of_ctx(rgpu_thread_ctx());
    return s >= 0 ? s : 0;
}

void conn_select_current(void)
{
    conn_cur = &rgpu_conns[t_forced >= 0 ? t_forced : rgpu_nservers > 1 ? current_server() : 0];
}

int conn_index(void) { return (int)(conn_cur - rgpu_conns); }

int conn_owns_ctx(uint64_t ctx) { return rgpu_nservers <= 1 || map_get(ctx) == conn_index(); }

CUresult conn_select(uint16_t op, const void **args, size_t args_len, uint8_t *buf)
{
    if (rgpu_nservers <= 1 || t_forced >= 0) {
        conn_select_current();
        return CUDA_SUCCESS;
    }
    struct rgpu_op_route route = rgpu_op_route(op);
    const uint8_t *a = *args;
    int server = -1;
    if (route.device >= 0 && (size_t)route.device + 4 <= args_len && args_len <= RGPU_ROUTE_BUF) {
        int local;
        server = rgpu_device_server((int32_t)rgpu_get_u32(a + route.device), &local);
        if (server < 0)
            return CUDA_ERROR_INVALID_DEVICE;
        memcpy(buf, a, args_len);
        rgpu_put_u32(buf + route.device, (uint32_t)local);
        *args = buf;
    }
    if (server < 0 && route.named >= 0 && (size_t)route.named + 8 <= args_len) {
        uint64_t h = rgpu_get_u64(a + route.named);
        server = route.named_memory ? rgpu_server_of_ptr(h) : rgpu_server_of_handle(h);
    }
    if (server < 0 && route.pointer >= 0 && (size_t)route.pointer + 8 <= args_len)
        server = rgpu_server_of_ptr(rgpu_get_u64(a + route.pointer));
    if (server < 0 && route.pointer2 >= 0 && (size_t)route.pointer2 + 8 <= args_len)
        server = rgpu_server_of_ptr(rgpu_get_u64(a + route.pointer2));
    conn_cur = &rgpu_conns[server >= 0 ? server : current_server()];
    return CUDA_SUCCESS;
}

CUresult conn_after(uint16_t op, const void *reply, size_t reply_len)
{
    if (rgpu_nservers <= 1 || !rgpu_op_route(op).creates || reply_len < 8)
        return CUDA_SUCCESS;
    uint64_t h = rgpu_get_u64(reply);
    pthread_mutex_lock(&map_lock);
    int rc = h ? map_put_locked(h, conn_index()) : 0;
    pthread_mutex_unlock(&map_lock);
    if (rc == -1)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == -2) {
        /* Calls naming it would go to the wrong server (and carry the other one's data there): this server is
         * broken or hostile, and is dropped. */
        rgpu_log(RGPU_LOG_ERROR, "rgpu-server %d answered opcode 0x%04x with handle 0x%llx, which another server "
                                 "made; closing its connection", conn_index(), op, (unsigned long long)h);
        conn_hang_up();
        return rgpu_conn.failure;
    }
    return CUDA_SUCCESS;
}
