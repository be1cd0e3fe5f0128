#include <stdint.h>
#include <time.h>
#include "check.h"
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(void){
  CUdevice dev; CUcontext ctx;
  CHECK(cuInit(0)); CHECK(cuDeviceGet(&dev,0)); CHECK(cuDevicePrimaryCtxRetain(&ctx,dev)); CHECK(cuCtxSetCurrent(ctx));
  size_t big=64u<<20; unsigned char*host=malloc(big); uint64_t x=12345;
  for(size_t i=0;i<big;i++,x=x*6364136223846793005ull+1442695040888963407ull) host[i]=(unsigned char)(x>>56);
  CUdeviceptr d; CHECK(cuMemAlloc(&d,big));
  for(int i=0;i<5;i++){double a=now();CHECK(cuMemcpyHtoD(d,host,big));double b=now();CHECK(cuCtxSynchronize());double c=now();
    printf("send %.1f ms  sync %.1f ms  total %.2f GB/s\n",(b-a)*1e3,(c-b)*1e3,big/(c-a)/1e9);}
  return 0;}
