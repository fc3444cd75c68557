// A gRPC server built with grpc-go, the reference implementation, for checking msgbench against
// a server it did not write: the standard health service (grpc.health.v1.Health/Check, always
// SERVING) and grpc-go's own server reflection, on cleartext HTTP/2.
//
//	go build -o grpc-go-server . && ./grpc-go-server -listen 127.0.0.1:50061 -for 30s
package main

import (
	"flag"
	"log"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:50061", "address to listen on")
	runFor := flag.Duration("for", 30*time.Second, "stop after this long")
	flag.Parse()
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	s := grpc.NewServer()
	healthpb.RegisterHealthServer(s, health.NewServer())
	reflection.Register(s)
	log.Printf("grpc-go server on %s", lis.Addr())
	go func() {
		time.Sleep(*runFor)
		s.Stop()
	}()
	if err := s.Serve(lis); err != nil && err != grpc.ErrServerStopped {
		log.Fatal(err)
	}
}
