//! Whatever a guest hands the device, it never touches memory it must not, loses a wake-up
//! or keeps a leftover: any sequence of client messages (`client_messages`), memory it must
//! not name (`memory`), malformed work requests (`wqes`), doorbells for nothing or beyond a
//! ring (`wild_doorbells`), doorbells racing the engine's sleep (`engine_sleep`), and a reset
//! in the middle of traffic (`reset`).

use qpip_testkit as support;

mod world;

mod admin_budget;
mod client_messages;
mod engine_sleep;
mod memory;
mod reset;
mod unpolled_cqs;
mod wild_doorbells;
mod wqes;
