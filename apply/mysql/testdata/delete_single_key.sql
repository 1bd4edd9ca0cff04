DELETE FROM `shop`.`orders`
WHERE `id` IN (1, 2)
