// Stream memory operations through the driver API, as a producer stream releases a consumer stream by a flag in
// device memory: what the device attributes say first, then 32-bit writes and waits on two streams (every
// condition), the 64-bit forms, cuStreamBatchMemOp (writes, a barrier, a wait), a write and a wait captured into a
// graph and replayed, and calls the driver refuses. Each releasing write is queued before its wait, and an event
// orders the two streams too, as NVIDIA asks of programs ordering work with these: rgpu's fake backend, which runs
// stream work as it is queued, completes every wait in that order. Everything is read back, so operations that do
// nothing fail the program.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include <cuda.h>

#include "check.cuh"

#define CHECK_CU(call) EXPECT((call) == CUDA_SUCCESS)

__global__ void fill(float *p, float v, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        p[i] = v;
}

enum { FLAG, DONE, MARKS, BATCH_FLAG = MARKS + 6, BATCH_MARK, CAPTURED, UNFENCED, WORDS32 = 16 };
enum { FLAG64, DONE64, BATCH64, WORDS64 };

struct Words {
    uint32_t w32[WORDS32];
    uint64_t w64[WORDS64];
};

static CUdeviceptr base;
static CUdeviceptr at32(int i) { return base + offsetof(Words, w32) + 4 * i; }
static CUdeviceptr at64(int i) { return base + offsetof(Words, w64) + 8 * i; }

static Words read_back(CUstream s)
{
    Words w;
    CHECK_CU(cuStreamSynchronize(s));
    CHECK(cudaMemcpy(&w, (void *)base, sizeof w, cudaMemcpyDeviceToHost));
    return w;
}

// The producer's write is ordered before the consumer's next work by an event as well.
static void handover(CUstream producer, CUstream consumer, CUevent written)
{
    CHECK_CU(cuEventRecord(written, producer));
    CHECK_CU(cuStreamWaitEvent(consumer, written, 0));
}

static CUstreamBatchMemOpParams value_op(CUstreamBatchMemOpType type, CUdeviceptr addr, uint64_t value, unsigned flags)
{
    CUstreamBatchMemOpParams p;
    std::memset(&p, 0, sizeof p);
    p.operation = type;
    p.writeValue.operation = type; // (a wait's fields lie where a write's do)
    p.writeValue.address = addr;
    if (type == CU_STREAM_MEM_OP_WAIT_VALUE_64 || type == CU_STREAM_MEM_OP_WRITE_VALUE_64)
        p.writeValue.value64 = value;
    else
        p.writeValue.value = (cuuint32_t)value;
    p.writeValue.flags = flags;
    return p;
}

int main()
{
    CHECK(cudaSetDevice(0));
    CHECK(cudaFree(0));
    CUdevice dev;
    CHECK_CU(cuCtxGetDevice(&dev));
    int v1 = -1, wide = -1, nor = -1;
    CHECK_CU(cuDeviceGetAttribute(&v1, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1, dev));
    CHECK_CU(cuDeviceGetAttribute(&wide, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, dev));
    CHECK_CU(cuDeviceGetAttribute(&nor, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR, dev));
    std::printf("attributes: mem ops (v1) %d, 64-bit %d, NOR %d\n", v1, wide, nor);
    EXPECT((wide == 0 || wide == 1) && (nor == 0 || nor == 1));

    CHECK(cudaMalloc((void **)&base, sizeof(Words)));
    CHECK(cudaMemset((void *)base, 0, sizeof(Words)));
    const int n = 4096;
    float *data, *copy;
    CHECK(cudaMalloc(&data, n * sizeof(float)));
    CHECK(cudaMalloc(&copy, n * sizeof(float)));
    CUstream producer, consumer;
    CHECK_CU(cuStreamCreate(&producer, CU_STREAM_NON_BLOCKING));
    CHECK_CU(cuStreamCreate(&consumer, CU_STREAM_NON_BLOCKING));
    CUevent written;
    CHECK_CU(cuEventCreate(&written, CU_EVENT_DISABLE_TIMING));

    // The producer fills the data and raises the flag; the consumer waits for the flag, copies, says it is done.
    fill<<<n / 256, 256, 0, (cudaStream_t)producer>>>(data, 2.5f, n);
    CHECK(cudaGetLastError());
    CHECK_CU(cuStreamWriteValue32(producer, at32(FLAG), 0x10, 0));
    handover(producer, consumer, written);
    CHECK_CU(cuStreamWaitValue32(consumer, at32(FLAG), 0x10, CU_STREAM_WAIT_VALUE_GEQ));
    CHECK(cudaMemcpyAsync(copy, data, n * sizeof(float), cudaMemcpyDeviceToDevice, (cudaStream_t)consumer));
    CHECK_CU(cuStreamWriteValue32(consumer, at32(DONE), 7, CU_STREAM_WRITE_VALUE_DEFAULT));
    Words w = read_back(consumer);
    EXPECT(w.w32[FLAG] == 0x10 && w.w32[DONE] == 7);
    float *host = new float[n];
    CHECK(cudaMemcpy(host, copy, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        EXPECT(host[i] == 2.5f);

    // Every condition, each satisfied by the flag's 0x10, each followed by a mark written in stream order.
    struct { unsigned flags; cuuint32_t value; } waits[] = {
        {CU_STREAM_WAIT_VALUE_GEQ, 0x10}, {CU_STREAM_WAIT_VALUE_GEQ, 0xFFFFFFF0u}, // cyclic: 0x10 is 0x20 past it
        {CU_STREAM_WAIT_VALUE_EQ, 0x10}, {CU_STREAM_WAIT_VALUE_AND, 0x30}, {CU_STREAM_WAIT_VALUE_NOR, 0x0F},
    };
    int conditions = 0;
    for (auto &c : waits) {
        if (c.flags == CU_STREAM_WAIT_VALUE_NOR && !nor)
            continue;
        CHECK_CU(cuStreamWaitValue32(consumer, at32(FLAG), c.value, c.flags));
        CHECK_CU(cuStreamWriteValue32(consumer, at32(MARKS + conditions), 100 + conditions, 0));
        conditions++;
    }
    w = read_back(consumer);
    for (int i = 0; i < conditions; i++)
        EXPECT(w.w32[MARKS + i] == 100u + i);

    // The 64-bit forms: the whole word, both halves.
    if (wide) {
        const uint64_t value = 0x123456789ABCDEF0ull;
        CHECK_CU(cuStreamWriteValue64(producer, at64(FLAG64), value, 0));
        handover(producer, consumer, written);
        CHECK_CU(cuStreamWaitValue64(consumer, at64(FLAG64), value, CU_STREAM_WAIT_VALUE_EQ));
        CHECK_CU(cuStreamWaitValue64(consumer, at64(FLAG64), value - 1, CU_STREAM_WAIT_VALUE_GEQ));
        CHECK_CU(cuStreamWriteValue64(consumer, at64(DONE64), ~value, 0));
        w = read_back(consumer);
        EXPECT(w.w64[FLAG64] == value && w.w64[DONE64] == ~value);
    }

    // A write that may pass earlier writes: the v2 API's headers say it does not take NO_MEMORY_BARRIER.
    CUresult unfenced = cuStreamWriteValue32(consumer, at32(UNFENCED), 5, CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER);
    std::printf("a write with NO_MEMORY_BARRIER: %s\n", unfenced == CUDA_SUCCESS ? "taken" : "refused");
    w = read_back(consumer);
    EXPECT(w.w32[UNFENCED] == (unfenced == CUDA_SUCCESS ? 5u : 0u));

    // A batch on each stream: the producer writes and fences; the consumer waits, then writes.
    CUstreamBatchMemOpParams produce[3], consume[3];
    int np = 0, nc = 0;
    produce[np++] = value_op(CU_STREAM_MEM_OP_WRITE_VALUE_32, at32(BATCH_FLAG), 3, 0);
    if (wide)
        produce[np++] = value_op(CU_STREAM_MEM_OP_WRITE_VALUE_64, at64(BATCH64), 0xFFFFFFFF00000001ull, 0);
    std::memset(&produce[np], 0, sizeof produce[np]);
    produce[np].memoryBarrier.operation = CU_STREAM_MEM_OP_BARRIER;
    produce[np++].memoryBarrier.flags = CU_STREAM_MEMORY_BARRIER_TYPE_GPU;
    consume[nc++] = value_op(CU_STREAM_MEM_OP_WAIT_VALUE_32, at32(BATCH_FLAG), 3, CU_STREAM_WAIT_VALUE_EQ);
    if (wide)
        consume[nc++] = value_op(CU_STREAM_MEM_OP_WAIT_VALUE_64, at64(BATCH64), 1, CU_STREAM_WAIT_VALUE_AND);
    consume[nc++] = value_op(CU_STREAM_MEM_OP_WRITE_VALUE_32, at32(BATCH_MARK), 11, 0);
    CHECK_CU(cuStreamBatchMemOp(producer, np, produce, 0));
    handover(producer, consumer, written);
    CHECK_CU(cuStreamBatchMemOp(consumer, nc, consume, 0));
    w = read_back(consumer);
    EXPECT(w.w32[BATCH_FLAG] == 3 && w.w32[BATCH_MARK] == 11);
    EXPECT(!wide || w.w64[BATCH64] == 0xFFFFFFFF00000001ull);

    // Captured: nothing is written until the graph runs, and each replay writes again.
    CUgraph graph;
    CUgraphExec exec;
    CHECK_CU(cuStreamBeginCapture(consumer, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK_CU(cuStreamWriteValue32(consumer, at32(CAPTURED), 42, 0));
    CHECK_CU(cuStreamWaitValue32(consumer, at32(CAPTURED), 42, CU_STREAM_WAIT_VALUE_EQ));
    CHECK_CU(cuStreamEndCapture(consumer, &graph));
    CHECK_CU(cuGraphInstantiate(&exec, graph, 0));
    EXPECT(read_back(consumer).w32[CAPTURED] == 0);
    for (int replay = 0; replay < 2; replay++) {
        CHECK(cudaMemsetAsync((void *)at32(CAPTURED), 0, 4, (cudaStream_t)consumer));
        CHECK_CU(cuGraphLaunch(exec, consumer));
        EXPECT(read_back(consumer).w32[CAPTURED] == 42);
    }
    CHECK_CU(cuGraphExecDestroy(exec));
    CHECK_CU(cuGraphDestroy(graph));

    // Refused at the call: an unknown wait condition, batch flags (reserved), too many operations. The streams go
    // on.
    EXPECT(cuStreamWaitValue32(consumer, at32(FLAG), 0, 0x4) != CUDA_SUCCESS);
    EXPECT(cuStreamBatchMemOp(consumer, 1, consume, 1) != CUDA_SUCCESS);
    static CUstreamBatchMemOpParams many[256];
    for (auto &p : many)
        p = value_op(CU_STREAM_MEM_OP_WRITE_VALUE_32, at32(BATCH_MARK), 12, 0);
    EXPECT(cuStreamBatchMemOp(consumer, 256, many, 0) != CUDA_SUCCESS);
    cudaGetLastError();
    CHECK_CU(cuStreamWriteValue32(consumer, at32(DONE), 8, 0));
    w = read_back(consumer);
    EXPECT(w.w32[DONE] == 8 && w.w32[BATCH_MARK] == 11);

    delete[] host;
    CHECK_CU(cuEventDestroy(written));
    CHECK_CU(cuStreamDestroy(producer));
    CHECK_CU(cuStreamDestroy(consumer));
    CHECK(cudaFree(data));
    CHECK(cudaFree(copy));
    CHECK(cudaFree((void *)base));
    std::printf("stream_memops OK (%d conditions, 64-bit %s)\n", conditions, wide ? "checked" : "not offered");
    return 0;
}
