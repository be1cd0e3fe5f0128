#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
static size_t BURST = 512 * 1024; static int MODE;
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e6+t.tv_nsec/1e3;}
static int lfd;
static void *reader(void *a){ int fd=accept(lfd,0,0); int one=1; setsockopt(fd,IPPROTO_TCP,TCP_NODELAY,&one,4); char *b=aligned_alloc(4096,1<<20); size_t got=0; for(;;){ssize_t n=recv(fd,b,256*1024,0); if(n<=0)break; got+=n; if(got%BURST==0) send(fd,"k",1,0);} return 0;}
int main(int c,char**v){ MODE=atoi(v[1]);
 lfd=socket(AF_INET,SOCK_STREAM,0); struct sockaddr_in a={.sin_family=AF_INET,.sin_addr.s_addr=htonl(0x7f000001)}; bind(lfd,(void*)&a,sizeof a); listen(lfd,1); socklen_t l=sizeof a; getsockname(lfd,(void*)&a,&l);
 pthread_t t; pthread_create(&t,0,reader,0); int fd=socket(AF_INET,SOCK_STREAM,0); int one=1; setsockopt(fd,IPPROTO_TCP,TCP_NODELAY,&one,4); connect(fd,(void*)&a,sizeof a);
 int p[2]; pipe(p); fcntl(p[1], F_SETPIPE_SZ, 1<<20);
 char *buf=aligned_alloc(4096,BURST); memset(buf,1,BURST); double tot=0, tot2=0; int N=400;
 for(int i=0;i<N;i++){ double t0=now(); size_t off=0;
   if(MODE==0){ while(off<BURST){ssize_t n=send(fd,buf+off,BURST-off,0); off+=n;} }
   else { while(off<BURST){ struct iovec iov={buf+off,BURST-off}; ssize_t n=vmsplice(p[1],&iov,1,0); if(n<0){perror("vmsplice");return 1;} ssize_t m=0; while(m<n){ssize_t k=splice(p[0],0,fd,0,n-m,SPLICE_F_MORE); if(k<0){perror("splice");return 1;} m+=k;} off+=n; } }
   double t1=now(); char k; recv(fd,&k,1,0); double t2=now(); if(i>=20){tot+=t1-t0; tot2+=t2-t0;} usleep(500);}
 printf("%s: send %.1f us, until read %.1f us\n", MODE?"vmsplice+splice":"send", tot/(N-20),tot2/(N-20)); return 0;}
