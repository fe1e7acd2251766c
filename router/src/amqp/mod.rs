//! Upstream's link protocol: AMQP 1.0 as skupper-router speaks it between routers.

pub mod routing;
