#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
static int BUF, STALL_US; static size_t BURST = 512 * 1024, SLOT = 256 * 1024;
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e6+t.tv_nsec/1e3;}
static void spin(double us){double t=now(); while(now()-t<us);}
static void sz(int fd){ if(BUF){setsockopt(fd,SOL_SOCKET,SO_SNDBUF,&BUF,4);setsockopt(fd,SOL_SOCKET,SO_RCVBUF,&BUF,4);} int one=1; setsockopt(fd,IPPROTO_TCP,TCP_NODELAY,&one,4);}
static int lfd;
static void *reader(void *a){ int fd=accept(lfd,0,0); sz(fd); static char b[1<<20]; size_t got=0, inslot=0; for(;;){ size_t want = SLOT - inslot; ssize_t n=recv(fd,b,want,0); if(n<=0)break; got+=n; inslot+=n; if(inslot==SLOT){ inslot=0; spin(STALL_US);} if(got%BURST==0) send(fd,"k",1,0);} return 0;}
int main(int c,char**v){ BUF=atoi(v[1]); STALL_US=atoi(v[2]);
 lfd=socket(AF_INET,SOCK_STREAM,0); if(BUF){setsockopt(lfd,SOL_SOCKET,SO_RCVBUF,&BUF,4);} struct sockaddr_in a={.sin_family=AF_INET,.sin_addr.s_addr=htonl(0x7f000001)}; bind(lfd,(void*)&a,sizeof a); listen(lfd,1); socklen_t l=sizeof a; getsockname(lfd,(void*)&a,&l);
 pthread_t t; pthread_create(&t,0,reader,0); int fd=socket(AF_INET,SOCK_STREAM,0); sz(fd); connect(fd,(void*)&a,sizeof a);
 char *buf=malloc(BURST); memset(buf,1,BURST); double tot=0, tot2=0; int N=400;
 for(int i=0;i<N;i++){ double t0=now(); size_t off=0; while(off<BURST){ssize_t n=send(fd,buf+off,BURST-off,0); off+=n;} double t1=now(); char k; recv(fd,&k,1,0); double t2=now(); if(i>=20){tot+=t1-t0; tot2+=t2-t0;} usleep(500);}
 int got; socklen_t gl=4; getsockopt(fd,SOL_SOCKET,SO_SNDBUF,&got,&gl);
 printf("buf %7d stall %2d: send %.1f us, until read %.1f us (sndbuf %d)\n",BUF,STALL_US,tot/(N-20),tot2/(N-20),got); return 0;}
