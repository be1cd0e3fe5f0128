/* CPU machine (2-core AMD EPYC VM): the coded-copy decoder's AVX2 fill of 1 MiB into memory the cache holds ("hot": the
 * same MiB each time) and into memory it does not ("cold": 64 MiB walked through), with plain and with non-temporal
 * stores.  gcc -O2 -o /tmp/nt cpu_fill_cold_hot.c && /tmp/nt  (output: cpu_fill_cold_hot.txt) */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
__attribute__((target("avx2"))) static void fill(uint8_t *p, size_t words, uint64_t v, uint64_t step, int nt){
  __m256i four=_mm256_set_epi64x(v+3*step,v+2*step,v+step,v), by4=_mm256_set1_epi64x(4*step);
  for(size_t k=0;k+4<=words;k+=4,four=_mm256_add_epi64(four,by4)){
    if(nt) _mm256_stream_si256((__m256i*)(p+8*k),four); else _mm256_storeu_si256((__m256i*)(p+8*k),four);}
  if(nt) _mm_sfence();
}
int main(){
  size_t mib=1<<20, region=64<<20; uint8_t *buf=aligned_alloc(4096,region);
  for(size_t i=0;i<region;i++) buf[i]=i;
  for(int rep=0;rep<3;rep++)
  for(int cold=0;cold<2;cold++) for(int nt=0;nt<2;nt++){
    double best=1e9;
    for(int t=0;t<5;t++){ double a=now(); for(int r=0;r<64;r++){ uint8_t *p=buf+(cold? (size_t)(r%64)*mib : 0); fill(p,mib/8,r,256,nt);} double b=now(); if((b-a)/64<best) best=(b-a)/64;}
    printf("%s %s: %.1f us per MiB\n", cold?"cold":"hot ", nt?"stream":"store ", best*1e6);
  }
  return buf[12345]==0;
}
